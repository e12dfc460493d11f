"""The inference half of the problem-file contract (``workload: {kind: inference, ...}``).

```yaml
workload: {kind: inference, input_len: 2048, output_len: 128, batch: 64, precision: fp8, kv_precision: fp8,
           weight_precision: fp8, serving: static, slo: {ttft_s: 2.0, tpot_s: 0.05}}
mapping: {tp: 2, pp: 1, ep: 1, dp: 4}           # static | continuous; dp = replicas, tp·pp·dp = num_gpus
mapping: {prefill: {tp: 2, dp: 2}, decode: {tp: 4, dp: 1}}   # disaggregated
objective: throughput                           # throughput | ttft | tpot | latency | gpus | cost
```
``workload.request_rate`` (requests/s) is a load the plan must sustain (``serving_step.compose``);
``workload.requests`` a finite set queued at once, served in waves (``inference.request_waves``).
``batch`` (requests per replica) absent means the planner chooses it; it may also be listed in
``mapping.batch`` (as ``solve`` reports it). Every mistake is a one-line ``ProblemError``.
"""

from __future__ import annotations

from parasol.model import checks
from parasol.model.choices import LayerGemm, ServingMode, ServingObjective
from parasol.model.errors import ProblemError
from parasol.model.inference import check_serving
from parasol.model.precision import INFERENCE_PRECISIONS, KV_PRECISIONS, WEIGHT_PRECISIONS
from parasol.model.specs import DECODE_ATTENTION_KERNELS, InferenceWorkload, PoolMapping, ServingMapping

from . import library

INFERENCE_WORKLOAD_KEYS = (
    "kind",
    "input_len",
    "output_len",
    "batch",
    "precision",
    "kv_precision",
    "weight_precision",
    "serving",
    "slo",
    "kv_block_tokens",
    "max_prefill_tokens",
    "decode_attention",
    "kv_cache_memory_fraction",
    "engine",
    "request_rate",
    "requests",
    "max_batch_size",
    "output_len_dispersion",
    "prompt_output_comoment",
    "output_len_max",
    "cuda_graph_min_batch",
    "unquantised_gemms",
    "attention_dp_balance",
    "framework",  # solver/frameworks.py: read by parse_problem
)
INFERENCE_OBJECTIVES = tuple(o.value for o in ServingObjective)
SERVING_MODES = tuple(m.value for m in ServingMode)
POOL_KEYS = ("tp", "pp", "ep", "dp")
COLOCATED_MAPPING_KEYS = POOL_KEYS + ("batch", "num_gpus")
DISAGGREGATED_MAPPING_KEYS = ("prefill", "decode", "batch", "num_gpus")


def parse_inference_workload(data: dict, src: str) -> InferenceWorkload:
    """An InferenceWorkload from ``workload:`` (kind inference)."""
    checks.keys(data, INFERENCE_WORKLOAD_KEYS, ("kind", "input_len", "output_len"), src, "workload.")
    precision = checks.choice(data.get("precision", "bf16"), INFERENCE_PRECISIONS, "workload.precision", src)
    slo = data.get("slo") or {}
    if not isinstance(slo, dict):
        raise ProblemError("must be a mapping {ttft_s, tpot_s}", source=src, field="workload.slo")
    checks.keys(slo, ("ttft_s", "tpot_s"), (), src, "workload.slo.")
    batch = data.get("batch")
    cap = data.get("max_batch_size")
    cap = None if cap is None else checks.positive_int(cap, "workload.max_batch_size", src)
    if batch is not None and cap is not None and checks.positive_int(batch, "workload.batch", src) > cap:
        raise ProblemError(
            f"{batch} is above workload.max_batch_size {cap}; allowed: 1 to {cap}", source=src, field="workload.batch"
        )
    output_len = checks.positive_int(data["output_len"], "workload.output_len", src, checks.MAX_SEQ_LEN)
    dispersion = _length_moment(data, "output_len_dispersion", src)
    return InferenceWorkload(
        input_len=checks.positive_int(data["input_len"], "workload.input_len", src, checks.MAX_SEQ_LEN),
        output_len=output_len,
        batch=None if batch is None else checks.positive_int(batch, "workload.batch", src),
        precision=precision,
        kv_precision=checks.choice(data.get("kv_precision", precision), KV_PRECISIONS, "workload.kv_precision", src),
        weight_precision=checks.choice(
            data.get("weight_precision", precision), WEIGHT_PRECISIONS, "workload.weight_precision", src
        ),
        serving=checks.choice(data.get("serving", "static"), SERVING_MODES, "workload.serving", src),
        ttft_slo_s=checks.positive_number(slo["ttft_s"], "workload.slo.ttft_s", src, "number of seconds")
        if "ttft_s" in slo
        else None,
        tpot_slo_s=checks.positive_number(slo["tpot_s"], "workload.slo.tpot_s", src, "number of seconds")
        if "tpot_s" in slo
        else None,
        kv_block_tokens=checks.positive_int(data.get("kv_block_tokens", 16), "workload.kv_block_tokens", src),
        max_prefill_tokens=_token_budget(data, src),
        decode_attention=checks.choice(
            data.get("decode_attention", "grouped"), DECODE_ATTENTION_KERNELS, "workload.decode_attention", src
        ),
        kv_cache_memory_fraction=checks.fraction(
            data.get("kv_cache_memory_fraction", 0.9), "workload.kv_cache_memory_fraction", src
        ),
        request_rate=None
        if data.get("request_rate") is None
        else checks.positive_number(data["request_rate"], "workload.request_rate", src, "number of requests per second"),
        requests=_requests(data, src),
        max_batch_size=cap,
        output_len_dispersion=dispersion,
        prompt_output_comoment=_length_moment(data, "prompt_output_comoment", src),
        output_len_max=_output_len_max(data, output_len, dispersion, src),
        cuda_graph_min_batch=_cuda_graph_min_batch(data, cap, src),
        unquantised_gemms=_unquantised_gemms(data.get("unquantised_gemms", []), src),
        attention_dp_balance=checks.fraction(data.get("attention_dp_balance", 1.0), "workload.attention_dp_balance", src),
        engine=_engine(data.get("engine"), src),
        source=src,
    )


def _unquantised_gemms(value, src: str) -> tuple:
    """``workload.unquantised_gemms``: a list of choices.LayerGemm names (a single name is read as a list of one; an
    empty key, as none)."""
    names = [] if value is None else value if isinstance(value, list) else [value]
    return tuple(dict.fromkeys(checks.choice(name, LayerGemm, "workload.unquantised_gemms", src).value for name in names))


# the two moments of the request lengths (inference.mean_decode_context): key -> (least value, whether it is allowed,
# what the number is); both at most MAX_SEQ_LEN (E[o²]/E[o]² <= max(o)/E[o], as E[p·o]/(E[p]·E[o]) is)
LENGTH_MOMENTS = {
    "output_len_dispersion": (1.0, True, "E[o²]/E[o]²"),
    "prompt_output_comoment": (0.0, False, "E[p·o]/(E[p]·E[o])"),
}


def _length_moment(data: dict, key: str, src: str) -> float:
    """``workload.<key>``, one of LENGTH_MOMENTS; 1.0 (identical requests) when absent."""
    least, allowed, meaning = LENGTH_MOMENTS[key]
    value = data.get(key, 1.0)
    number = checks.as_float(value)
    if number is None or not (number >= least if allowed else number > least) or number > checks.MAX_SEQ_LEN:
        bound = f"from {least:g} to" if allowed else f"above {least:g} and at most"
        raise ProblemError(
            f"must be a number {bound} {checks.MAX_SEQ_LEN:,} ({meaning}, 1 for identical requests), got {checks.shown(value)}",
            source=src,
            field=f"workload.{key}",
        )
    return number


def _output_len_max(data: dict, output_len: int, dispersion: float, src: str) -> int | None:
    """``workload.output_len_max``: the longest answer of a finite set under continuous serving whose lengths vary
    (output_len_dispersion above 1), above output_len and at least output_len x the dispersion (E[o²] <=
    max(o)·E[o]); None when absent."""
    if data.get("output_len_max") is None:
        return None
    value = checks.positive_int(data["output_len_max"], "workload.output_len_max", src, checks.MAX_SEQ_LEN)
    if data.get("requests") is None or data.get("serving", "static") != "continuous":
        raise ProblemError(
            "only a finite set (workload.requests) under continuous serving drains; give both, or drop output_len_max",
            source=src,
            field="workload.output_len_max",
        )
    if dispersion == 1.0:
        raise ProblemError(
            "requests of one length (output_len_dispersion 1, the default) end together, in waves; give the "
            "answers' output_len_dispersion (above 1), or drop output_len_max",
            source=src,
            field="workload.output_len_max",
        )
    least = dispersion * output_len
    if value <= output_len or value < least:
        raise ProblemError(
            f"must be above output_len {output_len:,} and at least output_len x output_len_dispersion, "
            f"{least:,.0f} (E[o²] <= max(o)·E[o]); got {value:,}",
            source=src,
            field="workload.output_len_max",
        )
    return value


def _cuda_graph_min_batch(data: dict, cap: int | None, src: str) -> int:
    """``workload.cuda_graph_min_batch``: the least batch a padded drain step runs at (``output_len_max``'s drain,
    and only that), at most the engine's max_batch_size where given."""
    if data.get("cuda_graph_min_batch") is None:
        return 1
    if data.get("output_len_max") is None:
        raise ProblemError(
            "pads the decode steps of a set's drain only: give workload.output_len_max too, or drop it",
            source=src,
            field="workload.cuda_graph_min_batch",
        )
    return checks.positive_int(data["cuda_graph_min_batch"], "workload.cuda_graph_min_batch", src, cap or checks.MAX_REQUESTS)


def _token_budget(data: dict, src: str) -> int | None:
    """``workload.max_prefill_tokens``: the engine's token budget of one pass, None where the problem states none."""
    value = data.get("max_prefill_tokens")
    return None if value is None else checks.positive_int(value, "workload.max_prefill_tokens", src)


def _requests(data: dict, src: str) -> int | None:
    """``workload.requests``: a finite set of requests queued at once, which a sustained load
    (``request_rate``) contradicts."""
    if data.get("requests") is None:
        return None
    if data.get("request_rate") is not None:
        raise ProblemError(
            "a finite set of requests queued at once and a sustained load (request_rate) exclude each other; give one",
            source=src,
            field="workload.requests",
        )
    return checks.positive_int(data["requests"], "workload.requests", src, checks.MAX_REQUESTS)


def _engine(value, src: str) -> str | None:
    """A library engine name, or the path of an engine file given as ``{file: PATH}`` (resolved
    against the problem file's folder)."""
    if value is None:
        return None
    path = library.file_path(value, src, "workload.engine")
    if path is None:
        return checks.choice(value, tuple(library.names("engines")), "workload.engine", src)
    path = str(path)
    try:
        library.load_engine(path)
    except ProblemError as exc:
        raise exc.located(field=exc.field or "workload.engine") from None
    return path


def _values(value, src: str, fld: str) -> tuple:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise ProblemError("an empty list allows nothing", source=src, field=fld)
    return tuple(dict.fromkeys(checks.positive_int(v, fld, src) for v in values))


def parse_inference_mapping(data, workload: InferenceWorkload, src: str) -> dict:
    """``mapping:`` of an inference problem as {key: allowed values}; pool keys of a disaggregated
    plan are 'prefill.tp', 'decode.dp', … ."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ProblemError("must be a mapping of choices", source=src, field="mapping")
    disaggregated = workload.serving == "disaggregated"
    allowed = DISAGGREGATED_MAPPING_KEYS if disaggregated else COLOCATED_MAPPING_KEYS
    unknown = sorted(set(map(str, data)) - set(allowed))
    if unknown:
        hint = (
            "; disaggregated serving takes a prefill and a decode pool"
            if disaggregated and unknown[0] in POOL_KEYS
            else "; prefill and decode pools are for serving: disaggregated"
            if unknown[0] in ("prefill", "decode")
            else ""
        )
        raise ProblemError(
            f"unknown key {unknown[0]!r}; allowed: {', '.join(allowed)}{hint}", source=src, field=f"mapping.{unknown[0]}"
        )
    out = {}
    for key, value in data.items():
        if key in ("prefill", "decode"):
            if not isinstance(value, dict):
                raise ProblemError("must be a mapping {tp, pp, ep, dp}", source=src, field=f"mapping.{key}")
            checks.keys(value, POOL_KEYS, (), src, f"mapping.{key}.")
            for sub, v in value.items():
                out[f"{key}.{sub}"] = _values(v, src, f"mapping.{key}.{sub}")
        else:
            out[key] = _values(value, src, f"mapping.{key}")
    if workload.batch is not None:
        if "batch" in out and workload.batch not in out["batch"]:
            raise ProblemError(
                f"mapping.batch {list(out['batch'])} does not allow workload.batch {workload.batch}",
                source=src,
                field="mapping.batch",
            )
        out["batch"] = (workload.batch,)
    return out


def check_inference_objective(objective, src: str) -> str:
    if objective not in INFERENCE_OBJECTIVES:
        raise ProblemError(
            f"{objective!r} is not allowed for inference; allowed: {', '.join(INFERENCE_OBJECTIVES)}",
            source=src,
            field="objective",
        )
    return objective


def fixed_serving_mapping(problem) -> ServingMapping:
    """The one serving plan ``evaluate`` runs: tp (each pool's tp and dp when disaggregated) and
    the batch given; pp and ep default to 1, dp to num_gpus/(tp·pp)."""
    src, m = problem.source, problem.mapping
    if len(problem.num_gpus) != 1:
        raise ProblemError("evaluate needs a single device count", source=src, field="system.num_gpus")

    def one(key, default=None):
        values = m.get(key)
        if values is None:
            if default is None:
                raise ProblemError("evaluate needs this key as a scalar", source=src, field=f"mapping.{key}")
            return default
        if len(values) != 1:
            raise ProblemError(f"evaluate needs one value, got the list {list(values)}", source=src, field=f"mapping.{key}")
        return values[0]

    if "batch" not in m:
        raise ProblemError("evaluate needs the batch (requests per replica)", source=src, field="workload.batch")
    batch = one("batch")
    if problem.workload.serving == "disaggregated":
        pools = [
            PoolMapping(tp=one(f"{p}.tp"), pp=one(f"{p}.pp", 1), ep=one(f"{p}.ep", 1), dp=one(f"{p}.dp"))
            for p in ("prefill", "decode")
        ]
        mapping = ServingMapping(batch=batch, decode=pools[1], prefill=pools[0])
    else:
        tp, pp = one("tp"), one("pp", 1)
        mapping = ServingMapping(
            batch=batch, decode=PoolMapping(tp=tp, pp=pp, ep=one("ep", 1), dp=one("dp", max(1, problem.num_gpus[0] // (tp * pp))))
        )
    try:
        check_serving(problem.model, problem.system(), problem.workload, mapping)
    except ProblemError as exc:
        raise exc.located(source=src) from None
    return mapping
