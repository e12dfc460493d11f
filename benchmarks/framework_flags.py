"""Record the flag / config-key names of a framework's release from its source (problems/frameworks/flags/).

The frameworks themselves (Megatron-LM, torchtitan, DeepSpeed, vLLM, TensorRT-LLM, SGLang) need torch and
GPUs and are no dependency of parasol, so the names ``parasol solve --emit`` may write are recorded here,
extracted from the framework's own argument / config definitions, and tests/test_frameworks.py checks every
emitted name against them. Refresh a list from a mirror (``git clone`` or the fetch tool's bare copy):

    python benchmarks/framework_flags.py argparse MIRROR COMMIT megatron/training/arguments.py > problems/frameworks/flags/megatron-lm.txt
    python benchmarks/framework_flags.py dataclass-sections MIRROR COMMIT torchtitan/config/job_config.py JobConfig > ...torchtitan.txt
    python benchmarks/framework_flags.py deepspeed MIRROR COMMIT > ...deepspeed.txt

``argparse`` also reads a file saved from elsewhere when MIRROR is ``-`` and COMMIT names its origin
(``repo@commit``), for repositories too large to mirror (vLLM, SGLang, TensorRT-LLM: read with a code browser).

Modes: argparse: every quoted ``--flag`` literal, plus (``click``) ``--flag`` options. dataclass-sections: the
``section.key`` names of a TOML config made of dataclasses (the top class's fields name the sections).
deepspeed: the JSON keys of DeepSpeed's config: the string constants of runtime/constants.py and the fields of
the pydantic models of runtime/zero/config.py and runtime/zero/offload_config.py (and their aliases).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys

FLAG = re.compile(r"""['"](--[A-Za-z0-9][A-Za-z0-9_.-]*)['"]""")


def show(mirror: str, commit: str, path: str) -> str:
    if mirror == "-":
        return open(path).read()
    return subprocess.run(["git", "-C", mirror, "show", f"{commit}:{path}"], check=True, capture_output=True, text=True).stdout


def argparse_flags(text: str) -> list[str]:
    return sorted(set(FLAG.findall(text)))


def _fields(node: ast.ClassDef) -> list[tuple[str, ast.AST]]:
    return [(s.target.id, s.annotation) for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]


def dataclass_sections(text: str, top: str) -> list[str]:
    tree = ast.parse(text)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    out = []
    for section, annotation in _fields(classes[top]):
        cls = classes.get(ast.unparse(annotation))
        if cls is None:
            continue
        out.append(f"[{section}]")
        out += [f"{section}.{name}" for name, _ in _fields(cls)]
    return sorted(out)


def deepspeed_keys(mirror: str, commit: str) -> list[str]:
    keys = set()
    for path in ("deepspeed/runtime/constants.py", "deepspeed/runtime/zero/config.py"):
        for node in ast.parse(show(mirror, commit, path)).body:  # KEY = "json_key" constants
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                if all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets):
                    value = node.value.value
                    if re.fullmatch(r"[a-z][a-z0-9_]*", value):
                        keys.add(value)
    for path, prefix in (
        ("deepspeed/runtime/zero/config.py", "zero_optimization."),
        ("deepspeed/runtime/zero/offload_config.py", "offload."),
    ):
        tree = ast.parse(show(mirror, commit, path))
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    keys.add(prefix + stmt.target.id)
                    for alias in re.findall(r"""alias=['"]([a-z_0-9]+)['"]""", ast.unparse(stmt)):
                        keys.add(prefix + alias)
    return sorted(keys)


def main(argv: list[str]) -> None:
    mode, mirror, commit = argv[:3]
    if mode == "argparse":
        names = sorted(set().union(*(argparse_flags(show(mirror, commit, p)) for p in argv[3:])))
        origin = "NVIDIA/Megatron-LM " + " ".join(argv[3:]) if "Megatron" in mirror else " ".join(argv[3:])
    elif mode == "dataclass-sections":
        names, origin = dataclass_sections(show(mirror, commit, argv[3]), argv[4]), "pytorch/torchtitan " + argv[3]
    elif mode == "deepspeed":
        names = deepspeed_keys(mirror, commit)
        origin = "deepspeedai/DeepSpeed deepspeed/runtime/constants.py, zero/config.py, zero/offload_config.py"
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(f"# extracted by benchmarks/framework_flags.py {mode} from {origin} at {commit}")
    print("\n".join(names))


if __name__ == "__main__":
    main(sys.argv[1:])
