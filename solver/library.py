"""The built-in library (problems/ shipped as the package data ``parasol.data``) and YAML loading.

Every loader turns a YAML mapping into a frozen spec from ``model.specs`` and converts any
mistake into a one-line ``ProblemError`` naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import yaml

from parasol.model import checks
from parasol.model.choices import Allocator, Architecture, allowed
from parasol.model.collectives import ALGORITHMS
from parasol.model.errors import ProblemError
from parasol.model.expert_parallel import A2A_COMM_SMS
from parasol.model.specs import AllocatorOverhead, DeviceSpec, MLASpec, ModelSpec, MoESpec, NetworkTier, PassRatios, SystemSpec
from parasol.model.topology import KINDS, InNetworkReduction, Level, Link, Tier, Topology

from . import read_files


class StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """YAML's safe loader, parsing with libyaml where installed (about 10x faster than the pure-Python
    parser), that refuses a key given twice in one mapping (YAML 1.2, Sec. 3.2.1.1: keys are unique;
    PyYAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:
                    continue  # an unhashable key: the constructor below says so
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark, f"found the key {key!r} twice", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep)


@functools.cache
def library_root() -> Path:
    """Folder holding models/, systems/ and examples/ however parasol was installed."""
    return Path(str(resources.files("parasol.data")))


MAX_YAML_BYTES = 4 << 20  # a problem, suite or library file: the largest shipped is under 100 KiB
MAX_YAML_DEPTH = 32  # nested mappings and lists: a problem file needs 5


def read_yaml(path: Path | str, what: str = "file") -> dict:
    """Parse a YAML file into a mapping; ProblemError on a missing file, bad syntax, a file over
    ``MAX_YAML_BYTES``, nesting deeper than ``MAX_YAML_DEPTH``, an alias (``*name``: a file's
    anchors could expand it without bound) or a key given twice."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise ProblemError(f"cannot read {what}: not a regular file", source=str(path))
    try:
        if path.stat().st_size > MAX_YAML_BYTES:
            raise ProblemError(f"the {what} is larger than {MAX_YAML_BYTES >> 20} MiB", source=str(path))
        with path.open("rb") as handle:  # never more than the limit, whatever the file became meanwhile
            raw = handle.read(MAX_YAML_BYTES + 1)
        read_files.note(path)
        if len(raw) > MAX_YAML_BYTES:
            raise ProblemError(f"the {what} is larger than {MAX_YAML_BYTES >> 20} MiB", source=str(path))
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ProblemError(f"{what} not found", source=str(path)) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError, OSError) as exc:
        raise ProblemError(f"cannot read {what}: {exc.__class__.__name__}", source=str(path)) from None
    try:
        _check_events(text, path)
        data = yaml.load(text, Loader=StrictLoader)  # noqa: S506 (a safe loader: StrictLoader is yaml's SafeLoader)
    except RecursionError:
        raise ProblemError(f"nested deeper than {MAX_YAML_DEPTH} levels", source=str(path)) from None
    except ProblemError:
        raise
    except ValueError as exc:  # an integer of more digits than Python converts (4,300)
        raise ProblemError(f"malformed YAML: {str(exc).split(':')[0]}", source=str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ProblemError(f"malformed YAML{where}: {getattr(exc, 'problem', None) or exc}", source=str(path)) from None
    if not isinstance(data, dict):
        raise ProblemError(f"the {what} must be a YAML mapping (key: value), got {type(data).__name__}", source=str(path))
    return data


def _check_events(text: str, path: Path) -> None:
    """ProblemError at the first alias or at nesting deeper than ``MAX_YAML_DEPTH`` (libyaml's event
    stream, before anything is built)."""
    depth = 0
    for event in yaml.parse(text, Loader=StrictLoader):
        if isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1 if event.start_mark else "?"
            raise ProblemError(f"an alias (*{event.anchor}) at line {line}: write the value out instead", source=str(path))
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise ProblemError(f"nested deeper than {MAX_YAML_DEPTH} levels at line {line}", source=str(path))
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def names(kind: str) -> list[str]:
    """Names available in the library for ``kind`` ('models', 'systems', 'systems/devices')."""
    return sorted(p.stem for p in (library_root() / kind).glob("*.yaml"))


NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
MAX_NAME_LENGTH = 64


def is_name(value) -> bool:
    """Whether ``value`` can name a library entry: 1-64 letters, digits, '.', '_' or '-', not starting
    with '.' (so that it names a file of the library's folder and nothing else)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_NAME_LENGTH
        and value[0] != "."
        and all(c in NAME_CHARACTERS for c in value)
    )


def _library_file(kind: str, name, field: str, source: str | None) -> Path:
    if not is_name(name):
        shown = repr(name)[:80] if isinstance(name, str) else type(name).__name__
        raise ProblemError(
            f"must be a name from the library (1-{MAX_NAME_LENGTH} letters, digits, '.', '_', '-') or a path to "
            f"a .yaml file, got {shown}",
            source=source,
            field=field,
        )
    path = library_root() / kind / f"{name}.yaml"
    if not path.is_file():
        raise ProblemError(f"unknown name {name!r}; allowed: {', '.join(names(kind))}", source=source, field=field)
    return path


def _read_library_entry(kind: str, name, field: str, allowed: tuple, required: tuple) -> tuple[str, dict]:
    """(path, mapping) of a library file, its keys checked."""
    path = _library_file(kind, name, field, None)
    data = read_yaml(path, f"{kind.split('/')[-1].rstrip('s')} file")
    checks.keys(data, allowed, required, str(path), "")
    return str(path), data


def _build(cls, kwargs: dict, source: str | None, prefix: str, with_source: bool = True):
    """Construct a spec; turn a wrong type into a ProblemError naming the field."""
    try:
        return cls(**kwargs, source=source) if with_source else cls(**kwargs)
    except ProblemError as exc:
        if exc.field and not exc.field.startswith(prefix):
            raise exc.located(source=source, field=prefix + exc.field) from None
        raise
    except TypeError as exc:
        raise ProblemError(f"bad value: {exc}", source=source, field=prefix.rstrip(".")) from None


MODEL_KEYS = (
    "name",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn",
    "vocab",
    "activation",
    "head_dim",
    "tied_embeddings",
    "position_embedding",
    "max_seq_len",
    "norm",
    "bias",
    "dropout",
    "params_b",
    "active_params_b",
    "moe",
    "mla",
    "sliding_window",
    "sliding_window_share",
    "parallel_block",
)
MOE_KEYS = (
    "experts",
    "top_k",
    "expert_ffn",
    "shared_experts",
    "shared_expert_ffn",
    "first_dense_layers",
    "capacity_factor",
    "load_imbalance",
    "max_nodes_per_token",
)
MLA_KEYS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "q_lora_rank")
MODEL_REQUIRED = ("layers", "hidden", "heads", "ffn", "vocab")


def model_from_dict(data: dict, source: str | None, prefix: str = "model.") -> ModelSpec:
    """A ModelSpec from a library file or an inline ``model:`` mapping."""
    checks.keys(data, MODEL_KEYS, MODEL_REQUIRED, source, prefix)
    kwargs = dict(data)
    kwargs.setdefault("name", "inline")
    kwargs.setdefault("kv_heads", kwargs["heads"])
    kwargs.setdefault("head_dim", 0)
    for key in ("tied_embeddings", "bias", "dropout", "parallel_block"):
        if key in kwargs and not isinstance(kwargs[key], bool):
            raise ProblemError(f"must be true or false, got {kwargs[key]!r}", source=source, field=prefix + key)
    if not isinstance(kwargs["name"], str):
        raise ProblemError(f"must be a string, got {kwargs['name']!r}", source=source, field=prefix + "name")
    for key in ("params_b", "active_params_b"):
        if kwargs.get(key) is not None:
            value = checks.as_float(kwargs[key])
            if value is None or value <= 0:
                raise ProblemError(
                    f"must be a positive number of billions, got {kwargs[key]!r}", source=source, field=prefix + key
                )
            kwargs[key] = value
    for key, spec, keys, required in (
        ("moe", MoESpec, MOE_KEYS, ("experts", "top_k", "expert_ffn")),
        ("mla", MLASpec, MLA_KEYS, ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")),
    ):
        if kwargs.get(key) is not None:
            block = kwargs[key]
            if not isinstance(block, dict):
                raise ProblemError("must be a mapping", source=source, field=prefix + key)
            checks.keys(block, keys, required, source, f"{prefix}{key}.")
            for name, value in block.items():
                ok = (
                    value is None
                    if name == "capacity_factor" and value is None
                    else (isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0)
                )
                if not ok:
                    raise ProblemError(
                        f"must be a non-negative number, got {value!r}", source=source, field=f"{prefix}{key}.{name}"
                    )
            kwargs[key] = _build(spec, block, source, f"{prefix}{key}.", with_source=False)
    return _build(ModelSpec, kwargs, source, prefix)


@functools.cache
def load_model(name: str) -> ModelSpec:
    """A model from problems/models/."""
    path = _library_file("models", name, "model", None)
    return model_from_dict(read_yaml(path, "model file"), str(path), prefix="")


def is_path(value) -> bool:
    """Whether a name is a YAML file's path rather than a library name. Inside parasol, a file a problem
    or system file names as ``{file: PATH}`` (``file_path``) travels as its resolved path."""
    return isinstance(value, str) and (value.endswith((".yaml", ".yml")) or "/" in value or "\\" in value)


FILE_KEY = "file"
MAX_PATH_LENGTH = 4096


def file_path(value, source: str | None, field: str) -> Path | None:
    """The file ``{file: PATH}`` names, read from the folder of ``source`` when relative; None when
    ``value`` is not such a mapping (a library name, or another form the caller reads). A name is
    resolved only inside the library: a bare string that looks like a path (a '/', a .yaml suffix) is
    refused, so no name in a file reads a file outside the library unless the file says ``file:``."""
    if isinstance(value, str) and is_path(value):
        raise ProblemError(
            f"is a name from the library; a file outside it is given as {{{FILE_KEY}: PATH}}: "
            f"write {{{FILE_KEY}: {checks.shown(value)}}}",
            source=source,
            field=field,
        )
    if not isinstance(value, dict) or FILE_KEY not in value:
        return None
    checks.keys(value, (FILE_KEY,), (FILE_KEY,), source, f"{field}.")
    path = value[FILE_KEY]
    if not isinstance(path, str) or not 0 < len(path) <= MAX_PATH_LENGTH or "\x00" in path:
        raise ProblemError(
            f"must be a file's path of 1-{MAX_PATH_LENGTH} characters, got {checks.shown(path)}",
            source=source,
            field=f"{field}.{FILE_KEY}",
        )
    return resolve(path, source)


def resolve(value: str, source: str | None) -> Path:
    """``value`` as a path; a relative one is read from the folder of the file ``source`` that gave it."""
    path = Path(value).expanduser()
    if not path.is_absolute() and source and Path(source).exists():
        path = Path(source).parent / path
    return path


def model_from_path(path: str | Path) -> ModelSpec:
    """A model file outside the library, validated as the library's are (its name: the file stem)."""
    data = read_yaml(path, "model file")
    data.setdefault("name", Path(path).stem)
    return model_from_dict(data, str(path), prefix="")


def model_from_hf_config(block: dict, source: str | None) -> ModelSpec:
    """A model from ``{hf_config: PATH, ...overrides}`` (solver/hf_config.py)."""
    from parasol.solver import hf_config

    return model_from_dict(hf_config.model_dict(block, source), source)


DEVICE_KEYS = (
    "name",
    "peak_flops",
    "hbm_bytes",
    "hbm_bytes_per_s",
    "host_bytes_per_s",
    "host_memory_bytes_per_s",
    "tdp_w",
    "sms",
    "serving_step_overhead_s",
    "pytorch_allocator",
    "softmax_exp_ratio",
    "nccl_channel_bytes_per_s",
    "architecture",
    "efficiency",
    "chiplets",
)
DEVICE_REQUIRED = ("peak_flops", "hbm_bytes", "hbm_bytes_per_s", "efficiency")


# the measured reserve of PyTorch's caching allocator (benchmarks/allocator_microbench.py writes its summary)
ALLOCATOR_FILE = "measurements/h200-allocator-microbench.yaml"
ALLOCATOR_GROUPS = ("recompute_full_scores", "recompute_full", "otherwise")  # model.specs.AllocatorOverhead


@functools.cache
def load_allocator_overhead(allocator: str) -> AllocatorOverhead:
    """What PyTorch's caching allocator keeps reserved beyond the live tensors under ``allocator``
    (``choices.Allocator``): the row ``summary.allocator_overhead.<allocator>`` of ``ALLOCATOR_FILE``."""
    path = library_root() / ALLOCATOR_FILE
    src, data = str(path), read_yaml(path, "measurement file")
    field = f"summary.allocator_overhead.{allocator}"
    summary = data.get("summary") if isinstance(data, dict) else None
    table = summary.get("allocator_overhead") if isinstance(summary, dict) else None
    row = table.get(allocator) if isinstance(table, dict) else None
    if not isinstance(row, dict):
        raise ProblemError(
            f"has no row for the allocator {allocator!r}; needs rows for {allowed(Allocator)}", source=src, field=field
        )
    checks.keys(row, ALLOCATOR_GROUPS, ALLOCATOR_GROUPS, src, field + ".")
    values = {key: checks.non_negative_number(row[key], f"{field}.{key}", src) for key in ALLOCATOR_GROUPS}
    return AllocatorOverhead(allocator=Allocator(allocator), **values)


def load_device(name: str, source: str | None = None) -> DeviceSpec:
    """A device from problems/systems/devices/, or from a device file by path (``is_path``; a
    relative path is read from the folder of ``source``, the system file naming it)."""
    if is_path(name):
        path = resolve(name, source)
        src, data = str(path), read_yaml(path, "device file")
        checks.keys(data, DEVICE_KEYS, DEVICE_REQUIRED, src, "")
        name = path.stem
    else:
        src, data = _read_library_entry("systems/devices", name, "device", DEVICE_KEYS, DEVICE_REQUIRED)
    return _device(name, src, data)


def _device(name: str, src: str, data: dict) -> DeviceSpec:
    peaks = data["peak_flops"]
    if not isinstance(peaks, dict) or not peaks:
        raise ProblemError("must map precisions to FLOP/s", source=src, field="peak_flops")
    peaks = {k: checks.non_negative_number(peaks.get(k), "peak_flops." + k, src) for k in peaks if peaks[k] is not None}
    eff = data["efficiency"]
    checks.keys(
        eff,
        (
            "gemm",
            "gemm_fp8",
            "gemm_fp4",
            "attention",
            "memory",
            "stream",
            "stream_fp8",
            "kv_stream",
            "moe_expert",
            "moe_overlap",
            "tp_overlap",
            "grouped_fp8",
            "mxfp8_gemm",
            "block_fp8_gemm",
            "block_fp8_grouped",
            "host_adam",
            "serving_gemm",
            "training_gemm",
            "attention_by_tokens",
            "fp8_attention_grouped",
            "attention_triton",
            "attention_triton_by_tokens",
            "attention_backward",
            "attention_triton_backward",
        ),
        ("gemm", "attention", "memory"),
        src,
        "efficiency.",
    )
    sms = checks.non_negative_int(data.get("sms", 0), "sms", src)
    if 0 < sms <= A2A_COMM_SMS:
        raise ProblemError(
            f"must be 0 (unknown) or more than the {A2A_COMM_SMS} SMs an overlapped all-to-all takes, got {sms}",
            source=src,
            field="sms",
        )
    xs, ys = _curve(eff["gemm"], src, "efficiency.gemm")
    low = tuple((key[5:], *_curve(eff[key], src, f"efficiency.{key}")) for key in ("gemm_fp8", "gemm_fp4") if key in eff)
    kv, attention = _tokens_curve(eff, "attention_by_tokens", src)
    triton_kv, triton = _tokens_curve(eff, "attention_triton_by_tokens", src)
    if triton and not eff.get("attention_triton"):
        raise ProblemError(
            "needs efficiency.attention_triton (the port's rate over the shapes) beside its curve by tokens",
            source=src,
            field="efficiency.attention_triton_by_tokens",
        )
    backward, backward_tokens, backward_curve = _backward_ratios(eff.get("attention_backward", 0.0), src)
    return DeviceSpec(
        name=checks.text(data.get("name", name), "name", src),
        peak_flops=peaks,
        hbm_bytes=checks.non_negative_number(data.get("hbm_bytes"), "hbm_bytes", src),
        hbm_bytes_per_s=checks.non_negative_number(data.get("hbm_bytes_per_s"), "hbm_bytes_per_s", src),
        gemm_efficiency_flops=xs,
        gemm_efficiency=ys,
        attention_efficiency=checks.non_negative_number(eff.get("attention"), "efficiency.attention", src),
        memory_efficiency=checks.non_negative_number(eff.get("memory"), "efficiency.memory", src),
        tdp_w=float(data.get("tdp_w", 0.0)),
        sms=sms,
        host_bytes_per_s=checks.non_negative_number(data.get("host_bytes_per_s", 0.0), "host_bytes_per_s", src),
        host_memory_bytes_per_s=checks.non_negative_number(
            data.get("host_memory_bytes_per_s", 0.0), "host_memory_bytes_per_s", src
        ),
        serving_step_overhead_s=checks.non_negative_number(
            data.get("serving_step_overhead_s", 0.0), "serving_step_overhead_s", src
        ),
        pytorch_allocator=checks.flag(data.get("pytorch_allocator", True), "pytorch_allocator", src),
        softmax_exp_ratio=checks.non_negative_number(data.get("softmax_exp_ratio", 0.0), "softmax_exp_ratio", src),
        fp8_attention_grouped=_pass_ratios(eff["fp8_attention_grouped"], src, "efficiency.fp8_attention_grouped")
        if "fp8_attention_grouped" in eff
        else None,
        nccl_channel_bytes_per_s=checks.non_negative_number(
            data.get("nccl_channel_bytes_per_s", 0.0), "nccl_channel_bytes_per_s", src
        ),
        architecture=None
        if data.get("architecture") is None
        else checks.choice(data["architecture"], Architecture, "architecture", src),
        **{
            f"{key}_efficiency": checks.fraction(eff.get(key), "efficiency." + key, src)
            for key in (
                "moe_expert",
                "moe_overlap",
                "tp_overlap",
                "stream",
                "stream_fp8",
                "kv_stream",
                "grouped_fp8",
                "mxfp8_gemm",
                "block_fp8_gemm",
                "block_fp8_grouped",
                "host_adam",
                "serving_gemm",
                "attention_triton",
            )
            if key in eff
        },
        # a share of a curve borrowed from another device may exceed 1 (gb300.yaml)
        training_gemm_efficiency=checks.factor(eff.get("training_gemm", 1.0), "efficiency.training_gemm", src),
        low_precision_gemm=low,
        attention_tokens=kv,
        attention_curve=attention,
        attention_triton_tokens=triton_kv,
        attention_triton_curve=triton,
        attention_backward=backward,
        attention_backward_tokens=backward_tokens,
        attention_backward_curve=backward_curve,
        attention_triton_backward=checks.non_negative_number(
            eff.get("attention_triton_backward", 0.0), "efficiency.attention_triton_backward", src
        ),
        source=src,
    )


# a serving-engine profile's keys (problems/engines/*.yaml) and the DeviceSpec fields they replace
ENGINE_EFFICIENCY_FIELDS = {
    "gemm": ("gemm_scale",),
    "stream": ("stream_efficiency", "stream_fp8_efficiency"),  # the engine's weight streaming, whatever the precision
    "kv_stream": ("kv_stream_efficiency",),
    "memory": ("memory_efficiency",),
    "attention": ("attention_efficiency",),
}


def engine_fields(profile: dict) -> dict:
    """{DeviceSpec field: value} that an engine profile's {key: value} sets (``ENGINE_EFFICIENCY_FIELDS``)."""
    return {field: value for key, value in profile.items() for field in ENGINE_EFFICIENCY_FIELDS[key]}


@functools.cache
def load_engine(name: str) -> dict:
    """A serving-engine profile from problems/engines/: {device name: {efficiency key: fraction}},
    the efficiencies that engine reaches on each device it covers (``ENGINE_EFFICIENCY_FIELDS``)."""
    if is_path(name):  # an engine file by path (the problem parser resolved it)
        src, data = name, read_yaml(name, "engine file")
        checks.keys(data, ("name", "devices"), ("devices",), src, "")
    else:
        src, data = _read_library_entry("engines", name, "workload.engine", ("name", "devices"), ("devices",))
    devices = data["devices"]
    if not isinstance(devices, dict) or not devices:
        raise ProblemError("must map device names to efficiencies", source=src, field="devices")
    known = names("systems/devices")
    profile = {}
    for device, block in devices.items():
        if device not in known:
            raise ProblemError(f"unknown device {device!r}; allowed: {', '.join(known)}", source=src, field=f"devices.{device}")
        if not isinstance(block, dict) or not block:
            raise ProblemError(
                f"must map efficiency keys ({', '.join(ENGINE_EFFICIENCY_FIELDS)}) to fractions",
                source=src,
                field=f"devices.{device}",
            )
        checks.keys(block, tuple(ENGINE_EFFICIENCY_FIELDS), (), src, f"devices.{device}.")
        profile[device] = {key: checks.fraction(block.get(key), f"devices.{device}." + key, src) for key in block}
    return profile


def device_under_engine(device: DeviceSpec, engine: str, source: str | None = None) -> DeviceSpec:
    """``device`` with the efficiencies serving engine ``engine`` reaches on it (``load_engine``);
    a ProblemError on ``workload.engine`` when the profile does not cover the device."""
    profile = load_engine(engine)
    if device.name not in profile:
        raise ProblemError(
            f"engine {engine!r} has no efficiencies for device {device.name!r}; it covers: {', '.join(profile)}",
            source=source,
            field="workload.engine",
        )
    return dataclasses.replace(device, **engine_fields(profile[device.name]))


def _curve(curve, src: str, field: str, axis: str = "flops") -> tuple[tuple, tuple]:
    """An efficiency curve {``axis``: [...], efficiency: [...]}: increasing sizes, values in (0, 1]."""
    if not isinstance(curve, dict):
        raise ProblemError(f"must be a mapping {{{axis}, efficiency}}", source=src, field=field)
    checks.keys(curve, (axis, "efficiency"), (axis, "efficiency"), src, f"{field}.")
    xs, ys = tuple(map(checks.as_float, curve[axis])), tuple(map(checks.as_float, curve["efficiency"]))
    if None in xs or None in ys or len(xs) != len(ys) or len(xs) < 2 or list(xs) != sorted(xs) or not all(0 < y <= 1 for y in ys):
        raise ProblemError(f"needs matching, increasing {axis} and efficiencies in (0, 1]", source=src, field=field)
    return xs, ys


def _tokens_curve(eff: dict, key: str, src: str) -> tuple[tuple, tuple]:
    """An attention curve by the keys a call attends, ``efficiency.KEY`` ({tokens, efficiency}), or ((), ()) where the
    device file gives none."""
    return _curve(eff[key], src, f"efficiency.{key}", "tokens") if key in eff else ((), ())


def _backward_ratios(data, src: str) -> tuple[float, tuple, tuple]:
    """(flat, tokens, ratios) of ``efficiency.attention_backward``: a positive number (flat), or {tokens, ratio} by the
    keys a call attends (increasing tokens, positive ratios); 0: unknown."""
    field = "efficiency.attention_backward"
    if not isinstance(data, dict):
        return checks.non_negative_number(data, field, src), (), ()
    return 0.0, *_ratio_rows(data, ("tokens", "ratio"), src, field)


def _pass_ratios(data, src: str, field: str) -> PassRatios:
    """FP8 attention's measured time over 16 bits {tokens, forward, backward}: increasing key lengths, positive ratios."""
    if not isinstance(data, dict):
        raise ProblemError("must be a mapping {tokens, forward, backward}", source=src, field=field)
    return PassRatios(*_ratio_rows(data, PassRatios._fields, src, field))


def _ratio_rows(data: dict, keys: tuple, src: str, field: str) -> list[tuple]:
    """The lists ``keys`` of a mapping of ratios by tokens (the first key: increasing tokens), each as a tuple: one
    length, at least 2, every value positive; ProblemError naming ``field`` otherwise."""
    checks.keys(data, keys, keys, src, f"{field}.")
    rows = [tuple(map(checks.as_float, data[key])) if isinstance(data[key], list) else (None,) for key in keys]
    xs = rows[0]
    if (
        any(None in row or len(row) != len(xs) for row in rows)
        or len(xs) < 2
        or list(xs) != sorted(set(xs))
        or not all(v > 0 for row in rows for v in row)
    ):
        raise ProblemError("needs lists of one length (at least 2): increasing tokens, positive ratios", source=src, field=field)
    return rows


def _tier(data, name: str, src: str) -> NetworkTier:
    if not isinstance(data, dict):
        raise ProblemError("must be a mapping", source=src, field=name)
    measured = ("deepep_efficiency",) if name == "scale_out" else ()  # DeepEP's NIC rate: the scale-out tier's alone
    checks.keys(
        data,
        ("domain_size", "bandwidth_bytes_per_s", "latency_s", "efficiency", *measured),
        ("bandwidth_bytes_per_s", "latency_s", "efficiency"),
        src,
        f"{name}.",
    )
    deepep = checks.fraction(data["deepep_efficiency"], f"{name}.deepep_efficiency", src) if "deepep_efficiency" in data else 0.0
    return NetworkTier(
        name=name,
        bandwidth_bytes_per_s=checks.non_negative_number(data.get("bandwidth_bytes_per_s"), f"{name}.bandwidth_bytes_per_s", src),
        latency_s=checks.non_negative_number(data.get("latency_s"), f"{name}.latency_s", src),
        efficiency=checks.fraction(data.get("efficiency"), f"{name}.efficiency", src),
        deepep_efficiency=deepep,
    )


SYSTEM_KEYS = (
    "name",
    "device",
    "gpus_per_node",
    "memory_reserve_bytes",
    "host_memory_bytes",
    "straggler",
    "scale_up",
    "scale_out",
    "cost",
    "topology",
)
SYSTEM_REQUIRED = ("device", "gpus_per_node", "scale_up", "scale_out")


class SystemParts(NamedTuple):
    """What a system file says, before the device count is chosen (``_spec`` makes the SystemSpec)."""

    source: str
    device: DeviceSpec
    gpus_per_node: int
    scale_up_domain: int
    scale_up: NetworkTier
    scale_out: NetworkTier
    memory_reserve_bytes: float
    host_memory_bytes: float
    straggler: float
    topology: object


def _system_parts(src: str, data: dict) -> SystemParts:
    """The parts of a system mapping (``SystemParts``); ``cost:`` is read by solver.cost_library."""
    device_file = file_path(data["device"], src, "device")
    device = load_device(str(device_file) if device_file else data["device"], src)
    domain = data["scale_up"].get("domain_size", data["gpus_per_node"]) if isinstance(data["scale_up"], dict) else None
    topology = topology_from_dict(data["topology"], src) if "topology" in data else None
    return SystemParts(
        source=src,
        device=device,
        gpus_per_node=int(data["gpus_per_node"]),
        scale_up_domain=int(domain or data["gpus_per_node"]),
        scale_up=_tier(data["scale_up"], "scale_up", src),
        scale_out=_tier(data["scale_out"], "scale_out", src),
        memory_reserve_bytes=float(data.get("memory_reserve_bytes", 0.0)),
        host_memory_bytes=checks.non_negative_number(data.get("host_memory_bytes", 0.0), "host_memory_bytes", src),
        straggler=checks.share(data.get("straggler", 0.0), "straggler", src),
        topology=topology,
    )


@functools.cache
def _system_file(name: str) -> SystemParts:
    return _system_parts(*_read_library_entry("systems", name, "system.name", SYSTEM_KEYS, SYSTEM_REQUIRED))


def _spec(name: str, parts: SystemParts, num_gpus: int) -> SystemSpec:
    return SystemSpec(name=name, num_gpus=num_gpus, **parts._asdict())


def is_system_path(name: str) -> bool:
    """Whether a system name is a file (a .yaml/.yml suffix or a folder separator) rather than a library name."""
    return name.endswith((".yaml", ".yml")) or "/" in name or "\\" in name


def load_system(name: str, num_gpus: int) -> SystemSpec:
    """A system from problems/systems/ with ``num_gpus`` devices (and its ``topology:`` if it has one),
    or from a system file when ``name`` is a path (``system_from_path``)."""
    if is_system_path(name):
        return dataclasses.replace(_system_from_file(str(name)), num_gpus=num_gpus)
    return _spec(name, _system_file(name), num_gpus)


@functools.cache
def _system_from_file(path: str) -> SystemSpec:
    return system_from_path(path, 1)


def system_from_path(path: str | Path, num_gpus: int) -> SystemSpec:
    """A system from a YAML file outside the library (its device named from the library)."""
    data = read_yaml(path, "system file")
    src = str(path)
    checks.keys(data, SYSTEM_KEYS, SYSTEM_REQUIRED, src, "")
    if not isinstance(data["device"], str) and not (isinstance(data["device"], dict) and FILE_KEY in data["device"]):
        raise ProblemError(
            f"must be a device name or {{{FILE_KEY}: PATH}}; allowed names: {', '.join(names('systems/devices'))}",
            source=src,
            field="device",
        )
    for key, value in (
        ("gpus_per_node", data["gpus_per_node"]),
        ("scale_up.domain_size", data["scale_up"].get("domain_size", 1) if isinstance(data["scale_up"], dict) else 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProblemError(f"must be a positive integer, got {value!r}", source=src, field=key)
    if "memory_reserve_bytes" in data:
        checks.non_negative_number(data.get("memory_reserve_bytes"), "memory_reserve_bytes", src)
    try:
        parts = _system_parts(src, data)
    except ProblemError as exc:
        if exc.source is None:
            raise exc.located(source=src) from None
        raise
    return _spec(checks.text(data.get("name", Path(path).stem), "name", src), parts, num_gpus)


# ---- topology: section (model/topology.py) ----------------------------------------------------

LINK_KEYS = ("bandwidth_bytes_per_s", "latency_s", "count")
LEVEL_KEYS = {
    "switch": ("in_network_reduction",),
    "fat_tree": ("tiers", "rail_optimized", "in_network_reduction"),
    "torus": ("dims", "wrap", "wrap_multiple"),
    "ring": (),
    "dragonfly": ("groups", "routers_per_group", "units_per_router", "global_links_per_router", "global_link"),
    "full_mesh": (),
}
LEVEL_COMMON = ("name", "kind", "size", "link", "efficiency")
TIER_KEYS = ("name", "size", "oversubscription", "radix", "latency_s")


def _link(data, source: str, field: str) -> Link:
    data = checks.mapping(data, field, source)
    checks.keys(data, LINK_KEYS, ("bandwidth_bytes_per_s", "latency_s"), source, f"{field}.")
    bandwidth = checks.non_negative_number(data.get("bandwidth_bytes_per_s"), f"{field}.bandwidth_bytes_per_s", source)
    if bandwidth <= 0:
        raise ProblemError("must be a positive number", source=source, field=f"{field}.bandwidth_bytes_per_s")
    return Link(
        bandwidth,
        checks.non_negative_number(data.get("latency_s"), f"{field}.latency_s", source),
        checks.positive_int(data.get("count", 1), f"{field}.count", source),
    )


def _tiers(data, source: str, field: str) -> tuple:
    tiers = []
    for j, tier in enumerate(checks.nonempty_list(data, field, source)):
        where = f"{field}[{j}]."
        tier = checks.mapping(tier, where.rstrip("."), source)
        checks.keys(tier, TIER_KEYS, ("name", "size"), source, where)
        oversub = checks.as_float(tier.get("oversubscription", 1.0))
        if oversub is None or oversub <= 0:
            raise ProblemError(
                f"must be a positive ratio (injection : uplink, 7 for 1:7), got {tier.get('oversubscription')!r}",
                source=source,
                field=where + "oversubscription",
            )
        tiers.append(
            Tier(
                checks.text(tier["name"], where + "name", source),
                checks.positive_int(tier.get("size"), where + "size", source),
                oversub,
                checks.positive_int(tier.get("radix", 1), where + "radix", source) if "radix" in tier else 0,
                checks.non_negative_number(tier.get("latency_s"), where + "latency_s", source) if "latency_s" in tier else 0.0,
            )
        )
    return tuple(tiers)


def _level(data, source: str, field: str) -> Level:
    data = checks.mapping(data, field, source)
    kind = data.get("kind")
    if kind not in KINDS:
        raise ProblemError(f"{kind!r} is not a topology kind; allowed: {', '.join(KINDS)}", source=source, field=f"{field}.kind")
    where = f"{field}."
    checks.keys(
        data,
        LEVEL_COMMON + LEVEL_KEYS[kind],
        ("name", "kind", "link", "efficiency") + (("size",) if kind in ("switch", "full_mesh", "ring") else ()),
        source,
        where,
    )
    kwargs = {
        "name": checks.text(data["name"], where + "name", source),
        "kind": kind,
        "link": _link(data["link"], source, where + "link"),
        "efficiency": checks.fraction(data.get("efficiency"), where + "efficiency", source),
    }
    inn = data.get("in_network_reduction", False)
    if inn is not False:
        inn = checks.mapping(inn, where + "in_network_reduction", source)
        checks.keys(inn, ("efficiency", "latency_s"), ("efficiency", "latency_s"), source, where + "in_network_reduction.")
        kwargs["in_network"] = InNetworkReduction(
            checks.fraction(inn.get("efficiency"), where + "in_network_reduction.efficiency", source),
            checks.non_negative_number(inn.get("latency_s"), where + "in_network_reduction.latency_s", source),
        )
    if kind == "torus":
        dims = checks.nonempty_list(data.get("dims"), where + "dims", source)
        kwargs["dims"] = tuple(checks.positive_int(d, where + "dims", source) for d in dims)
        wrap = data.get("wrap", True)
        wrap = [wrap] * len(dims) if isinstance(wrap, bool) else wrap
        if not isinstance(wrap, list) or len(wrap) != len(dims) or not all(isinstance(w, bool) for w in wrap):
            raise ProblemError(
                f"must be true/false or a list of {len(dims)} true/false (one per dimension)", source=source, field=where + "wrap"
            )
        kwargs["wrap"] = tuple(wrap)
        if "wrap_multiple" in data:
            kwargs["wrap_multiple"] = checks.positive_int(data.get("wrap_multiple"), where + "wrap_multiple", source)
    elif kind == "ring":
        kwargs.update(dims=(checks.positive_int(data.get("size"), where + "size", source),), wrap=(True,))
    elif kind == "fat_tree":
        kwargs["tiers"] = _tiers(data["tiers"], source, where + "tiers") if "tiers" in data else ()
        kwargs["rail_optimized"] = checks.flag(data.get("rail_optimized", False), where + "rail_optimized", source)
    elif kind == "dragonfly":
        for key in LEVEL_KEYS["dragonfly"][:-1]:
            kwargs[key] = checks.positive_int(data.get(key), where + key, source)
        kwargs["global_link"] = _link(data.get("global_link"), source, where + "global_link")
    size = data.get("size")
    if size is None and kind == "fat_tree" and not kwargs["tiers"]:
        raise ProblemError("is required (or give tiers)", source=source, field=where + "size")
    derived = {  # the kinds whose size follows from their other fields
        "fat_tree": lambda: math.prod(t.size for t in kwargs["tiers"]),
        "torus": lambda: math.prod(kwargs["dims"]),
        "dragonfly": lambda: kwargs["groups"] * kwargs["routers_per_group"] * kwargs["units_per_router"],
    }
    if size is not None:
        kwargs["size"] = checks.positive_int(data.get("size"), where + "size", source)
    elif kind in derived:
        kwargs["size"] = derived[kind]()
    else:
        raise ProblemError("is required: a positive integer", source=source, field=where + "size")
    if kind == "fat_tree" and not kwargs["tiers"]:
        kwargs["tiers"] = (Tier("network", kwargs["size"]),)
    return _build(Level, kwargs, source, where, with_source=False)


def topology_from_dict(data, source: str, prefix: str = "topology") -> Topology:
    """A Topology from a system file's ``topology:`` mapping: ``levels`` (innermost first) and
    optionally ``algorithms`` ({op: algorithm} the system fixes). ProblemError naming the field."""
    data = checks.mapping(data, prefix, source)
    checks.keys(data, ("levels", "algorithms"), ("levels",), source, f"{prefix}.")
    levels = tuple(
        _level(level, source, f"{prefix}.levels[{i}]")
        for i, level in enumerate(checks.nonempty_list(data["levels"], f"{prefix}.levels", source))
    )
    fixed = checks.mapping(data.get("algorithms", {}), f"{prefix}.algorithms", source)
    for op, name in fixed.items():
        if op not in ALGORITHMS:
            raise ProblemError(
                f"unknown collective {op!r}; allowed: {', '.join(ALGORITHMS)}", source=source, field=f"{prefix}.algorithms"
            )
        if name not in ALGORITHMS[op]:
            raise ProblemError(
                f"{name!r} is not an {op} algorithm; allowed: {', '.join(ALGORITHMS[op])}",
                source=source,
                field=f"{prefix}.algorithms.{op}",
            )
    return Topology(levels, tuple(fixed.items()), source)
