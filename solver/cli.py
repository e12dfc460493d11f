"""The ``parasol`` command line.

Every user mistake ends as one line on stderr, ``parasol: <file>: <field>: <what is allowed>``,
and exit status 2; never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys

from parasol import __version__
from parasol.model.choices import ServingObjective, TrainingObjective
from parasol.model.collectives import ALL_ALGORITHMS, OPS
from parasol.model.errors import ProblemError

from . import deadline, progress, read_files
from .catalogue import LISTS
from .fanout import Engine
from .suites import Tier, suite_names

# What a command needs is imported by that command: the problem files' parser and the library (numpy, about
# 0.3 s), the planner, reports and tables (pandas, OR-Tools: about 0.6 s more on 2 cores) after the problem
# file has been read. `parasol --help` and argument errors import none of them; bad input and `parasol list`
# answer without the planner.

# exit status (README "Commands"): a plan; no plan exists (the binding limit named); bad input
EXIT_PLAN, EXIT_NO_PLAN, EXIT_BAD_INPUT = 0, 1, 2
OBJECTIVES = tuple(dict.fromkeys(str(o) for o in (*TrainingObjective, *ServingObjective)))


METHODS = ("auto", "cpsat", "bound", "enumerate")  # planner.SolveMethod (not imported: the parser starts fast)
METHOD_HELP = (
    "auto (default): every point of a space small enough that this is faster, else blocks of it bounded and "
    "the rest enumerated (training), else CP-SAT; or force one"
)
EMIT_HELP = (
    "print the best plan as workload.framework's launch configuration (command line, TOML or JSON) instead "
    'of the table; with --json, under the key "launch" (docs/frameworks.md)'
)


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, as argparse does, but without the usage block
        print(f"parasol: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


FORCE_HELP = (
    "replace an output file that exists (only a regular file, never the command's own input; without it parasol never overwrites)"
)


def _build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog="parasol",
        description="Plan LLM training and serving on large machines.",
        epilog="Exit status: 0 a plan (or the answer asked for), 1 no plan exists (the binding limit is named), 2 bad input.",
    )
    parser.add_argument("--version", action="version", version=f"parasol {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)
    ev = sub.add_parser("evaluate", help="evaluate the mapping fixed in a problem file")
    ev.add_argument("problem", help="problem YAML file")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    ev.add_argument("--emit", action="store_true", help=EMIT_HELP)
    for name, text in (
        ("solve", "find the best mapping with CP-SAT (proven optimal, or bound and gap)"),
        ("enumerate", "evaluate every mapping of the same space (the exhaustive baseline)"),
    ):
        sp = sub.add_parser(name, help=text)
        sp.add_argument("problem", help="problem YAML file")
        sp.add_argument(
            "--objective",
            choices=OBJECTIVES,
            help="overrides the problem's objective (training: throughput, step_time, memory, tokens_per_gpu; "
            "inference: throughput, ttft, tpot, latency)",
        )
        sp.add_argument("--top", type=_positive_int, default=1, help="return the K best distinct mappings")
        sp.add_argument(
            "--time-limit",
            type=_positive_float,
            default=60.0 if name == "solve" else None,
            help="seconds (solve: default 60; enumerate: none)",
        )
        sp.add_argument("--json", action="store_true", help="print one JSON object")
        sp.add_argument("--quiet", action="store_true", help="no progress lines on stderr (shown on a terminal after 1 s)")
        if name == "solve":
            sp.add_argument("--emit", action="store_true", help=EMIT_HELP)
            sp.add_argument("--workers", type=_workers, default=1, help="CP-SAT workers (default 1: deterministic)")
            sp.add_argument("--seed", type=_seed, default=0, help="CP-SAT random seed")
            sp.add_argument("--method", choices=METHODS, default="auto", help=METHOD_HELP)
        else:
            sp.add_argument(
                "--all",
                action="store_true",
                help='with --json: list every feasible point with its metrics under "points"; with --out: write every point',
            )
        sp.add_argument(
            "--out",
            metavar="FILE",
            help="also write the plans (enumerate --all: every point) as a table: .csv, .parquet or .json",
        )
        sp.add_argument("--force", action="store_true", help=FORCE_HELP)
    pa = sub.add_parser("pareto", help="the exact Pareto front of two or three metrics")
    pa.add_argument("problem", help="problem YAML file (serving or training)")
    pa.add_argument(
        "--objectives",
        required=True,
        type=_metric_pair,
        metavar="A,B[,C]",
        help="two metrics; serving: e.g. tokens_per_s_per_gpu,tokens_per_s_per_user (also tokens_per_s, ttft_s, "
        "tpot_s, e2e_latency_s, peak_memory_gib); training: throughput,cost (also memory, step_time, "
        "tokens_per_usd)",
    )
    pa.add_argument("--plot", metavar="FILE.png", help="also draw the front into a PNG (needs the plot extra: matplotlib)")
    pa.add_argument("--out", metavar="FILE", help="also write the front as a table: .csv, .parquet or .json")
    pa.add_argument("--force", action="store_true", help=FORCE_HELP)
    pa.add_argument("--time-limit", type=_positive_float, default=120.0, help="seconds for the whole front (default 120)")
    pa.add_argument("--workers", type=_workers, default=1, help="CP-SAT workers (default 1: deterministic)")
    pa.add_argument("--seed", type=_seed, default=0, help="CP-SAT random seed")
    pa.add_argument("--method", choices=METHODS, default="auto", help=METHOD_HELP)
    pa.add_argument("--json", action="store_true", help="print one JSON object {front, status, ...}")
    pa.add_argument("--quiet", action="store_true", help="no progress lines on stderr (shown on a terminal after 1 s)")
    li = sub.add_parser("list", help="what the built-in library holds: models, systems, devices, engines, frameworks, suites")
    li.add_argument("what", choices=tuple(LISTS), help="which part of the library")
    li.add_argument("--json", action="store_true", help="print one JSON array of {name, ...}")
    rp = sub.add_parser("report", help="solve (or --evaluate) a problem and write one self-contained HTML report")
    rp.add_argument("problem", help="problem YAML file (serving or training)")
    rp.add_argument(
        "-o", "--output", required=True, metavar="FILE.html", help="the page to write (never over a file without --force)"
    )
    rp.add_argument("--force", action="store_true", help=FORCE_HELP)
    rp.add_argument("--evaluate", action="store_true", help="report the mapping fixed in the file instead of solving")
    rp.add_argument("--objective", choices=OBJECTIVES, help="overrides the problem's objective (as solve)")
    rp.add_argument("--pareto", type=_metric_pair, metavar="A,B", help="also draw the Pareto front of two metrics (as pareto)")
    rp.add_argument(
        "--time-limit", type=_positive_float, default=60.0, help="seconds for the solve, and for the front (default 60)"
    )
    rp.add_argument("--workers", type=_workers, default=1, help="CP-SAT workers (default 1: deterministic)")
    rp.add_argument("--seed", type=_seed, default=0, help="CP-SAT random seed")
    rp.add_argument("--quiet", action="store_true", help="no progress lines on stderr (shown on a terminal after 1 s)")
    _add_suite_parsers(sub)
    sw = sub.add_parser("sweep", help="solve every point of a design-space sweep (models x systems x GPU counts x ...)")
    sw.add_argument("spec", help="sweep spec YAML: a base problem and the axes to vary (docs/suites.md)")
    _add_fanout_arguments(sw, "seconds per point (default: the spec's time_limit, else 60)")
    sw.add_argument("--out", metavar="FILE", help="also write the table: .csv, .parquet or .json")
    sw.add_argument("--force", action="store_true", help=FORCE_HELP)
    sw.add_argument("--json", action="store_true", help="print one JSON object {points, ...}")
    co = sub.add_parser("cost", help="device cost (chiplets, yield, packaging, HBM, NRE) and system capex, power, $/hour")
    co.add_argument("--system", required=True, help="a library system name (e.g. dgx-h100) or a system YAML file")
    co.add_argument("--num-gpus", type=_positive_int, help="devices in the system (default: one scale-up domain)")
    co.add_argument("--chiplets", type=_positive_int, help="compute dies per package (default: the device's own)")
    co.add_argument("--gpu-hour-usd", type=_positive_float, help="rental price per GPU-hour; replaces the amortised hourly cost")
    co.add_argument("--json", action="store_true", help="print one JSON object")
    co = sub.add_parser(
        "collective",
        help="time one collective on a system's topology (nccl-tests conventions)",
        description="Alpha-beta time of a collective on the GPUs of a library system, with the "
        "nccl-tests algorithm and bus bandwidths. GB/s = 1e9 bytes/s; busbw = algbw x "
        "2(n-1)/n for allreduce ((n-1)/(n+1) when --algorithm in_network is given, as "
        "nccl-tests does under NCCL_ALGO=NVLS), (n-1)/n for allgather, reducescatter and "
        "alltoall, 1 for p2p (nccl-tests doc/PERFORMANCE.md).",
    )
    co.add_argument("--system", required=True, help="a system of the library (problems/systems/)")
    co.add_argument(
        "--op",
        required=True,
        choices=OPS,
        help="the collective; p2p is nccl-tests sendrecv: every rank sends B to the next one at once",
    )
    co.add_argument(
        "--bytes",
        required=True,
        type=_size,
        dest="nbytes",
        metavar="B",
        help="buffer size in bytes as nccl-tests counts it (the whole array for allgather/reducescatter, "
        "one rank's send buffer for alltoall); K/M/G suffixes are powers of 1024",
    )
    co.add_argument("--gpus", required=True, type=_positive_int, help="GPUs in the group, placed compactly")
    co.add_argument("--algorithm", choices=ALL_ALGORITHMS, help="fix the algorithm (default: the system's, else the fastest)")
    co.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object {time_s, algbw_gbps, busbw_gbps, algorithm} (GB/s = 1e9 bytes/s)",
    )
    return parser


def _add_suite_parsers(sub) -> None:
    su = sub.add_parser("suite", help="benchmark suites with known optima: run them, export their CP-SAT models")
    verbs = su.add_subparsers(dest="verb", required=True, parser_class=_ArgumentParser)
    run = verbs.add_parser("run", help="solve every instance of a suite and hold it to its known optimum")
    run.add_argument("suite", help="a suite of the library (problems/suites/: " + ", ".join(suite_names()) + ") or a suite file")
    run.add_argument("--tier", action="append", choices=tuple(Tier), help="only this tier (repeatable; default: all)")
    _add_fanout_arguments(run, "seconds per instance (default: each instance's own)")
    run.add_argument("--out", metavar="FILE", help="also write the per-instance table: .csv, .parquet or .json")
    run.add_argument("--plot", metavar="FILE.png", help="draw the performance profile (needs the plot extra: matplotlib)")
    run.add_argument("--force", action="store_true", help=FORCE_HELP)
    run.add_argument(
        "--compare",
        action="append",
        metavar="RESULTS",
        help="an earlier run's --out table, drawn beside this run in --plot's profile (repeatable)",
    )
    run.add_argument("--json", action="store_true", help="print one JSON object {instances, summary}")
    ex = verbs.add_parser("export", help="write each instance's CP-SAT model, for other solvers and versions")
    ex.add_argument("suite", help="a suite of the library or a suite file")
    ex.add_argument("--format", default="cpsat", choices=("cpsat",), help="cpsat: CP-SAT CpModelProto files (.pb)")
    ex.add_argument("--tier", action="append", choices=tuple(Tier), help="only this tier (repeatable; default: all)")
    ex.add_argument(
        "--out", metavar="DIR", help="the folder to write into (default: SUITE-cpsat; files in it are replaced only with --force)"
    )
    ex.add_argument("--force", action="store_true", help=FORCE_HELP)


def _add_fanout_arguments(parser, limit_help: str) -> None:
    parser.add_argument(
        "--engine", default="local", choices=tuple(Engine), help="local: processes on this machine; ray: a Ray cluster"
    )
    parser.add_argument(
        "--address",
        help="the Ray cluster to join (ray.init's address, e.g. 10.0.0.1:6379 or auto); "
        "none: a Ray instance started on this machine",
    )
    parser.add_argument(
        "--workers", type=_positive_int, help="tasks at once (local default 1: in this process; ray: the cluster's CPUs)"
    )
    parser.add_argument("--time-limit", type=_positive_float, help=limit_help)
    parser.add_argument("--seed", type=_seed, default=None, help="CP-SAT random seed of every solve (default 0)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr (shown on a terminal)")


def _positive(kind, most):
    """An argparse type: a positive int or (finite) float up to ``most``, with a one-line message otherwise."""
    noun = "integer" if kind is int else "number"

    def parse(text: str):
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            value = None
        if value is None or not 0 < value <= most:  # NaN and inf fail this too
            raise argparse.ArgumentTypeError(f"expected a positive {noun} up to {most:g}, got {text[:40]!r}")
        return value

    return parse


MAX_COUNT = 2**31 - 1  # counts on the command line: within CP-SAT's int32 parameters
MAX_NUMBER = 1e12  # seconds, prices and other numbers on the command line
MAX_WORKERS = 256  # CP-SAT workers: threads on this machine
_positive_int, _positive_float = _positive(int, MAX_COUNT), _positive(float, MAX_NUMBER)
_workers = _positive(int, MAX_WORKERS)
MAX_SEED = 2**31 - 1  # CP-SAT's random_seed is an int32


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to {MAX_SEED}, got {text!r}")
    return value


def _metric_pair(text: str) -> tuple:
    names = tuple(x.strip() for x in text.split(","))
    if len(names) not in (2, 3) or not all(names):
        raise argparse.ArgumentTypeError(f"expected two or three metric names separated by commas, got {text!r}")
    return names


def _size(text: str) -> int:
    from .collective import parse_bytes  # noqa: PLC0415 (lazy: see the imports)

    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_evaluate(args) -> int:
    from .problem import load_problem  # noqa: PLC0415 (lazy: see the imports)

    problem = load_problem(args.problem)
    from .planner import planner_for  # noqa: PLC0415

    planner = planner_for(problem)
    num_gpus, mapping = planner.fixed_plan(problem)
    launch = None
    if args.emit:
        from .launch import emit  # noqa: PLC0415 (the framework profiles: only with --emit)

        launch = emit(problem, num_gpus, mapping)
    evaluation = planner.evaluate(problem, num_gpus, mapping)
    if args.json:
        doc = planner.evaluation_json(problem, mapping, evaluation)
        if launch is not None:
            doc["launch"] = launch
        print(json.dumps(doc, indent=2))
    elif launch is not None:
        print(launch)
    else:
        print(planner.evaluation_table(problem, mapping, evaluation))
    met = evaluation.metrics
    return EXIT_PLAN if met.get("fits", True) and met.get("meets_slo", True) else EXIT_NO_PLAN


def _plan_command(args, run) -> int:
    from .launch import emit  # noqa: PLC0415 (lazy: see the imports)
    from .problem import load_problem  # noqa: PLC0415

    problem = load_problem(args.problem)
    from .planner import planner_for  # noqa: PLC0415
    from .report import plan_result_json, plan_result_table  # noqa: PLC0415
    from .results import check_table_file, plans_frame, write_table  # noqa: PLC0415

    if args.out:
        check_table_file(args.out)  # before the search, not after it
    planner = planner_for(problem)
    emitting = getattr(args, "emit", False)
    if emitting:
        emit(problem, 0, None, check_only=True)  # no framework: one line before the search
    with progress.showing(_progress(args)):
        result = run(problem, args)
    launch = None
    if emitting and result.plans:  # no plan: the table says what binds, exit 1
        best = result.plans[0]
        launch = emit(problem.for_system(best.system_name), best.num_gpus, best.mapping)
    keep_all = getattr(args, "all", False)
    if args.out:
        write_table(result.table if keep_all and result.table is not None else plans_frame(result.plans), args.out)
    if args.json:
        doc = plan_result_json(problem, result, args.top)
        if keep_all:
            doc["points"] = points_json(result.table)
        if launch is not None:
            doc["launch"] = launch
        print(json.dumps(doc, indent=2))
    elif launch is not None:
        print(launch)
    else:
        print(plan_result_table(planner, problem, result))
    return EXIT_PLAN if result.plans else EXIT_NO_PLAN


def _progress(args) -> progress.Progress | None:
    """Progress lines on stderr when it is a terminal, unless --quiet."""
    if args.quiet or not sys.stderr.isatty():
        return None
    return progress.Progress(sys.stderr)


def points_json(table) -> list:
    """enumerate --all --json: every feasible point as {mapping, metrics}."""
    if table is None:
        return []
    feasible = table[table["fits"] & table.get("meets_slo", True)] if "fits" in table else table
    mapping_columns = _mapping_columns()
    metric_names = [c for c in table.columns if c not in mapping_columns and c != "system"]
    out = []
    for row in feasible.to_dict("records"):
        out.append(
            {
                **({"system": row["system"]} if "system" in row else {}),  # several systems compared
                "mapping": {k: _plain(v) for k, v in row.items() if k in mapping_columns},
                "metrics": {k: _plain(row[k]) for k in metric_names},
            }
        )
    return out


def _mapping_columns() -> tuple:
    """A front table's mapping columns: the device count, a training mapping's keys, a serving plan's."""
    from .problem import MAPPING_KEYS  # noqa: PLC0415

    return ("num_gpus", *MAPPING_KEYS, "batch", "prefill.tp", "prefill.pp", "prefill.ep", "prefill.dp")


def _plain(value):
    if hasattr(value, "item"):
        value = value.item()
    return str(value) if isinstance(value, str) else value


def _solve(problem, args):
    from .planner import solve  # noqa: PLC0415

    return solve(
        problem,
        objective=args.objective,
        top=args.top,
        time_limit=deadline.left(args.time_limit),
        workers=args.workers,
        seed=args.seed,
        method=args.method,
    )


def _enumerate(problem, args):
    from .planner import enumerate_space  # noqa: PLC0415

    return enumerate_space(
        problem, objective=args.objective, top=args.top, time_limit=deadline.left(args.time_limit), keep_all=args.all
    )


def cmd_solve(args) -> int:
    return _plan_command(args, _solve)


def cmd_enumerate(args) -> int:
    return _plan_command(args, _enumerate)


def cmd_pareto(args) -> int:
    from .problem import load_problem  # noqa: PLC0415

    problem = load_problem(args.problem)
    from .pareto import pareto_front  # noqa: PLC0415
    from .planner import planner_for  # noqa: PLC0415
    from .report import front_json, front_table, plot_front  # noqa: PLC0415
    from .results import check_new_file, check_table_file, plans_frame, write_table  # noqa: PLC0415

    if args.plot:
        check_new_file(args.plot, "--plot")  # before the front is searched, not after
    if args.out:
        check_table_file(args.out)
    planner = planner_for(problem)
    with progress.showing(_progress(args)):
        limit = deadline.left(args.time_limit)
        result = pareto_front(problem, args.objectives, limit, args.workers, args.seed, method=args.method)
    if args.plot:
        plot_front(planner, problem, result, args.plot)
    if args.out:
        write_table(plans_frame(result.plans), args.out)
    print(json.dumps(front_json(planner, problem, result), indent=2) if args.json else front_table(planner, problem, result))
    return EXIT_PLAN if result.plans else EXIT_NO_PLAN


def cmd_report(args) -> int:
    from .problem import load_problem  # noqa: PLC0415

    problem = load_problem(args.problem)
    from . import html_report  # noqa: PLC0415
    from .planner import planner_for  # noqa: PLC0415
    from .report import plan_result_table  # noqa: PLC0415
    from .results import check_new_file  # noqa: PLC0415

    check_new_file(args.output, "-o")  # before the solve, not after it
    with progress.showing(_progress(args)):
        plan, result, front = html_report.report_inputs(problem, args)
    if plan is None:  # no plan exists: the reason, no page
        print(plan_result_table(planner_for(problem), problem, result))
        print(f"parasol: no plan, so no report written to {args.output}", file=sys.stderr)
        return EXIT_NO_PLAN
    on_system = problem.for_system(plan.system_name)
    html_report.write_report(args.output, html_report.report_html(planner_for(problem), on_system, plan, result, front))
    print(f"wrote {args.output}")
    return EXIT_PLAN


def cmd_cost(args) -> int:
    from .cost_report import cost_document, cost_table  # noqa: PLC0415

    try:
        doc = cost_document(args.system, num_gpus=args.num_gpus, chiplets=args.chiplets, gpu_hour_usd=args.gpu_hour_usd)
    except ProblemError as exc:  # the chiplet count came from the command line
        raise exc.located(field="--chiplets") if exc.field == "system.chiplets" else exc from None
    print(json.dumps(doc, indent=2) if args.json else cost_table(doc))
    return 0


def cmd_list(args) -> int:
    from .catalogue import catalogue_json, catalogue_table  # noqa: PLC0415

    print(json.dumps(catalogue_json(args.what), indent=2) if args.json else catalogue_table(args.what))
    return EXIT_PLAN


def cmd_collective(args) -> int:
    from .collective import result_json, result_table, run_collective  # noqa: PLC0415

    result = run_collective(args.system, args.op, args.nbytes, args.gpus, args.algorithm)
    print(json.dumps(result_json(result)) if args.json else result_table(args.system, result))
    return 0


def _fanout_progress(args, what: str):
    """on_done for run_tasks: a line per finished task on stderr when it is a terminal, unless --quiet."""
    sink = _progress(args)
    if sink is None:
        return None

    def on_done(result, finished, total):
        sink.update(f"{what}: {finished}/{total} done, last {result.name} {result.status} in {result.wall_s:.2f} s")

    return on_done


def cmd_suite(args) -> int:
    from . import suite_report  # noqa: PLC0415 (lazy: see the imports)
    from .fanout import run_tasks  # noqa: PLC0415
    from .results import check_new_file, check_table_file, write_table  # noqa: PLC0415
    from .suites import load_suite  # noqa: PLC0415

    suite = load_suite(args.suite)
    instances = suite.select(tuple(Tier(t) for t in args.tier or ()))
    if not instances:
        raise ProblemError(f"no instance of tier {', '.join(args.tier)}", source=str(suite.path), field="--tier")
    if args.verb == "export":
        from .cpsat_export import export_suite  # noqa: PLC0415

        written = export_suite(suite, instances, args.out or f"{suite.name}-cpsat", args.format)
        print(f"wrote {len(written) - 1} CP-SAT models and manifest.json into {args.out or suite.name + '-cpsat'}")
        return EXIT_PLAN
    if args.out:
        check_table_file(args.out)
    if args.plot:
        check_new_file(args.plot, "--plot")
    compared = {p: suite_report.read_results(p) for p in args.compare or ()}
    engine = Engine(args.engine)
    with progress.showing(_progress(args)):
        results = run_tasks(
            [i.task(args.time_limit, args.seed or 0) for i in instances],
            engine,
            args.workers,
            args.address,
            _fanout_progress(args, f"suite {suite.name}"),
        )
    frame = suite_report.results_frame(suite, instances, results, str(engine), args.time_limit)
    summary = suite_report.summary(frame)
    if args.out:
        write_table(frame, args.out)
    if args.plot:
        runs = {f"this run ({engine})": frame, **compared}
        suite_report.plot_profile(runs, f"suite {suite.name}: performance profile", args.plot)
    if args.json:
        doc = {"suite": suite.name, "engine": str(engine), "instances": json.loads(frame.to_json(orient="records"))}
        doc["summary"] = dataclasses.asdict(summary)
        print(json.dumps(doc, indent=2))
    else:
        workers = args.workers or (1 if engine is Engine.LOCAL else "the cluster's CPUs")
        print(f"suite {suite.name}: {len(instances)} instances, engine {engine}, workers {workers}")
        print(suite_report.run_table(frame))
        print(suite_report.summary_line(summary))
    return EXIT_PLAN if summary.reproduced == summary.instances else EXIT_NO_PLAN


def cmd_sweep(args) -> int:
    from .fanout import run_tasks  # noqa: PLC0415
    from .results import check_table_file, write_table  # noqa: PLC0415
    from .sweep import check_points, invalid_result, load_sweep, sweep_frame, sweep_table  # noqa: PLC0415

    sweep = load_sweep(args.spec, args.time_limit, args.seed)
    if args.out:
        check_table_file(args.out)
    refused = check_points(sweep)
    runnable = [p.task for p in sweep.points if p.name not in refused]
    with progress.showing(_progress(args)):
        done = run_tasks(runnable, Engine(args.engine), args.workers, args.address, _fanout_progress(args, "sweep"))
    results = {r.name: r for r in done}
    results.update({name: invalid_result(name, why) for name, why in refused.items()})
    frame = sweep_frame(sweep, results)
    if args.out:
        write_table(frame, args.out)
    if args.json:
        print(
            json.dumps(
                {
                    "spec": str(sweep.path),
                    "axes": [str(a) for a in sweep.axes],
                    "points": json.loads(frame.to_json(orient="records")),
                },
                indent=2,
            )
        )
    else:
        print(f"sweep {sweep.path}: {len(sweep.points)} points over {' x '.join(str(a) for a in sweep.axes)}")
        print(sweep_table(sweep, frame))
    planned = sum(1 for r in results.values() if r.num_gpus is not None)
    return EXIT_PLAN if planned else EXIT_NO_PLAN


COMMANDS = {
    "evaluate": cmd_evaluate,
    "solve": cmd_solve,
    "enumerate": cmd_enumerate,
    "pareto": cmd_pareto,
    "report": cmd_report,
    "cost": cmd_cost,
    "collective": cmd_collective,
    "list": cmd_list,
    "suite": cmd_suite,
    "sweep": cmd_sweep,
}


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command ended by Ctrl-C
STOPPABLE = ("solve", "enumerate", "pareto")  # a first Ctrl-C ends their search with what it has found


def main(argv: list[str] | None = None) -> int:
    # --time-limit counts from here, loading and imports too; on the command line (no argv given) from the process's start
    deadline.start_command(from_process_start=argv is None)
    read_files.forget()  # a command's outputs may replace none of the files it reads
    try:
        args = _build_parser().parse_args(argv)
        from .results import replacing  # noqa: PLC0415

        _check_outputs_apart(args)
        stopping = deadline.stopping_on_ctrl_c() if args.command in STOPPABLE else contextlib.nullcontext()
        with replacing(getattr(args, "force", False)), stopping:
            code = COMMANDS[args.command](args)
            if deadline.interrupted():
                print("parasol: interrupted: what is printed above is the best found so far, unproven", file=sys.stderr)
                return EXIT_INTERRUPTED
        return code
    except ProblemError as exc:
        print(f"parasol: {printable(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("parasol: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


OUTPUT_FLAGS = {"out": "--out", "plot": "--plot", "output": "-o"}  # the attributes that name a file a command writes
INPUT_ATTRIBUTES = ("problem", "spec", "system", "suite", "compare")  # those that may name files it reads (compare: a list)


def _check_outputs_apart(args) -> None:
    """ProblemError unless every file the command writes is apart from the files it reads and from the others it
    writes: --force lets a command replace an earlier output, never its own input (nothing the user wrote is
    overwritten), and two outputs on one path would leave the first half-replaced by the second. The files named
    on the command line are checked here, before any work; the ones they name in turn (a sweep's base, a problem's
    model file) when the output is written (``read_files``)."""
    for name in INPUT_ATTRIBUTES:  # the files named here count as read from the start
        given = getattr(args, name, None)
        for source in given if isinstance(given, list) else [given]:
            if isinstance(source, str) and os.path.isfile(source):
                read_files.note(source)
    written: dict[str, str] = {}
    for attribute, flag in OUTPUT_FLAGS.items():
        path = getattr(args, attribute, None)
        if not isinstance(path, str):
            continue
        target = os.path.realpath(path)
        read = read_files.read_file_at(path)
        if read is not None:
            raise ProblemError(f"{path} is the file this command reads ({read}); write elsewhere", field=flag)
        if target in written:
            raise ProblemError(f"{path} is also the {written[target]} file; give each output its own name", field=flag)
        written[target] = flag


def printable(text: str) -> str:
    """``text`` on one line: control characters (newlines, escapes, NUL) written as Python escapes, so
    that a key or value from a file can neither start a second line nor drive the terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
