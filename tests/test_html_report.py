"""parasol report (one self-contained HTML page), its screenshot in headless Chromium, the pipeline
schedule it draws, and pareto --plot for training and serving fronts."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from conftest import EXAMPLE, REPO, TINY_GQA, run_main, write_yaml

from parasol.model.pipeline import pipeline_schedule, pipeline_time_s, schedule_order
from parasol.solver.html_report import schedule_svg

SERVING_FRONT = REPO / "problems" / "examples" / "llama3-8b-pareto.yaml"
INFEASIBLE = REPO / "problems" / "examples" / "gpt3-175b-8gpu-infeasible.yaml"
CHARTS = ("time-breakdown", "memory-breakdown", "pipeline-schedule", "placement", "pareto-front")


class Page(HTMLParser):
    """What a test reads from a page: the svg ids, the rows of each table under a div id, the
    <title> texts inside each svg, every tag and attribute name, all text."""

    def __init__(self, text: str):
        super().__init__()
        self.svgs, self.tables, self.tips, self.tags, self.links, self.text = [], {}, {}, set(), [], []
        self.grids = {}  # the rows of each table of more than two columns under a div id, header first
        self._div, self._svg, self._cell, self._row, self._in_title = None, None, None, [], False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        self.links += [v for k, v in attrs if k in ("src", "href") and v]
        if tag == "div" and "id" in a:
            self._div = a["id"]
            self.tables[self._div] = {}
        elif tag == "svg":
            self._svg = a.get("id")
            self.svgs.append(self._svg)
            self.tips[self._svg] = []
        elif tag in ("th", "td"):
            self._cell = ""
        elif tag == "title" and self._svg:
            self._in_title = True

    def handle_endtag(self, tag):
        if tag in ("th", "td") and self._cell is not None:
            self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._div and len(self._row) == 2:
            self.tables[self._div][self._row[0]] = self._row[1]
            self._row = []
        elif tag == "tr" and self._div:
            self.grids.setdefault(self._div, []).append(self._row)
            self._row = []
        elif tag == "tr":
            self._row = []
        elif tag == "div":
            self._div = None
        elif tag == "svg":
            self._svg = None
        elif tag == "title":
            self._in_title = False

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell += data
        if self._in_title and self._svg:
            self.tips[self._svg].append(data)


def _report(args: list, path: Path) -> Page:
    proc = run_main(["report", *args, "-o", str(path)])
    assert proc.returncode == 0, proc.stderr
    return Page(path.read_text(encoding="utf-8"))


def _self_contained(page: Page) -> None:
    assert not page.links and not {"script", "link", "img", "iframe"} & page.tags, (page.links, page.tags)


@pytest.fixture(scope="module")
def training_page(tmp_path_factory) -> tuple[Path, Page]:
    path = tmp_path_factory.mktemp("report") / "gpt3.html"
    return path, _report([str(EXAMPLE), "--evaluate"], path)


def test_training_report_holds_the_plan_and_its_charts(training_page):
    """The page of the example's fixed mapping: every mapping key and value of `evaluate --json`,
    the four training charts, each non-zero time and memory part in its chart, one schedule row per
    stage with each stage's forwards and backwards, one placement row per group of more than one."""
    _, page = training_page
    doc = json.loads(run_main(["evaluate", str(EXAMPLE), "--json"]).stdout)
    _self_contained(page)
    assert page.svgs == list(CHARTS[:4])
    mapping = dict(doc["mapping"])
    assert page.tables["plan"]["GPUs"] == str(mapping.pop("num_gpus"))
    assert page.tables["mapping"] == {k: str(v).replace("true", "True").replace("false", "False") for k, v in mapping.items()}
    legend = " ".join(page.text)
    for key, value in doc["breakdown"]["time_s"].items():
        assert (key in legend) == (abs(value) > 1e-12), key
    for key in doc["breakdown"]["memory_gib"]:
        assert key in legend
    tips = page.tips["pipeline-schedule"]
    pp = mapping["pp"]
    for stage in (0, pp - 1):
        assert any(t.startswith(f"stage {stage} F ") for t in tips) and any(t.startswith(f"stage {stage} B ") for t in tips)
    assert not any(t.startswith(f"stage {pp} ") for t in tips)
    groups = {t.split(":")[0] for t in page.tips["placement"] if "members in this scale-up domain" in t}
    assert groups == {k for k in ("tp", "dp", "pp") if mapping[k] > 1}
    head, *rows = page.grids["stages"]  # the stage table: every stage once, the slowest marked, as --json has them
    assert head[0] == "stages" and "forward ms" in head
    spans = [range(int(a), int(b or a) + 1) for a, _, b in (r[0].lstrip("* ").partition("-") for r in rows)]
    assert [i for span in spans for i in span] == list(range(pp))
    marked = [span for r, span in zip(rows, spans) if r[0].startswith("*")]
    assert len(marked) == 1 and doc["breakdown"]["critical_stage"] in marked[0]
    total = head.index("total ms")
    for r, span in zip(rows, spans):
        assert float(r[total]) == pytest.approx(1e3 * doc["stages"][span[0]]["time_per_microbatch_s"], abs=0.006)


@pytest.mark.slow  # starts parasol processes
def test_serving_report_with_its_pareto_front(tmp_path):
    """A solved serving plan: its time (TTFT and TPOT) and memory (KV cache) charts, no pipeline
    schedule, the plan the solve returns, and the front with as many points as `pareto` finds."""
    objectives = "tokens_per_s_per_gpu,tokens_per_s_per_user"
    page = _report([str(SERVING_FRONT), "--pareto", objectives], tmp_path / "serve.html")
    solved = json.loads(run_main(["solve", str(SERVING_FRONT), "--json"]).stdout)
    front = json.loads(run_main(["pareto", str(SERVING_FRONT), "--objectives", objectives, "--json"]).stdout)
    _self_contained(page)
    assert page.svgs == ["time-breakdown", "memory-breakdown", "placement", "pareto-front"]
    assert page.tables["plan"]["solve status"] == solved["status"]
    assert page.tables["mapping"]["batch"] == str(solved["mapping"]["batch"])
    assert page.tables["mapping"]["tp"] == str(solved["mapping"]["tp"])
    text = " ".join(page.text)
    assert "kv_cache" in text and "TTFT" in text and "TPOT" in text
    points = [t for t in page.tips["pareto-front"] if t.startswith("tp ")]
    assert len(points) == len(front["front"]) >= 2


@pytest.mark.slow  # starts parasol processes
def test_report_escapes_text_refuses_to_overwrite_and_writes_nothing_without_a_plan(tmp_path):
    model = {**TINY_GQA, "name": "<b>tiny</b> & co"}
    problem = {
        "model": model,
        "system": {"name": "dgx-h100", "num_gpus": 8},
        "workload": {"kind": "training", "seq_len": 2048, "global_batch": 16, "precision": "bf16"},
        "mapping": {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 1},
    }
    path = write_yaml(tmp_path / "p.yaml", problem)
    out = tmp_path / "r.html"
    page = _report([str(path), "--evaluate"], out)
    raw = out.read_text(encoding="utf-8")
    assert "<b>tiny" not in raw and "&lt;b&gt;tiny&lt;/b&gt; &amp; co" in raw
    assert page.tables["plan"]["model"] == "<b>tiny</b> & co"
    before = out.read_bytes()
    proc = run_main(["report", str(path), "--evaluate", "-o", str(out)])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "exists" in proc.stderr
    assert out.read_bytes() == before
    proc = run_main(["report", str(path), "--pareto", "throughput,nonsense", "-o", str(tmp_path / "x.html")])
    assert proc.returncode == 2 and "--pareto" in proc.stderr and not (tmp_path / "x.html").exists()
    missing = tmp_path / "none.html"
    proc = run_main(["report", str(INFEASIBLE), "-o", str(missing)])
    assert proc.returncode == 1 and "INFEASIBLE" in proc.stdout and not missing.exists()


@pytest.mark.parametrize("pp,m,v", [(1, 4, 1), (4, 8, 1), (4, 6, 1), (4, 8, 2), (8, 16, 4), (16, 32, 2)])
def test_schedule_runs_each_pass_once_in_order_and_ends_when_the_model_says(pp, m, v):
    """Equal stages (f = 1, b = 2): every (pass, micro-batch, chunk) once per stage, no two passes of a
    stage overlap, a forward never starts before the one it reads ends, and the last pass ends at
    ``pipeline_time_s`` (m + (p-1)/v)(f+b) (micro-batches a multiple of pp when interleaved)."""
    passes = pipeline_schedule([1.0] * pp, [2.0] * pp, m, v)
    want = {(k, mb, c) for k, mb, c in itertools.product("FB", range(m), range(v))}
    ends = {}
    for s in range(pp):
        mine = sorted((p for p in passes if p[0] == s), key=lambda p: p[4])
        assert {(p[1], p[2], p[3]) for p in mine} == want
        assert all(a[5] <= b[4] + 1e-12 for a, b in zip(mine, mine[1:]))
        assert [(p[1], p[2], p[3]) for p in mine] == schedule_order(s, pp, m, v)
        ends.update({(s, p[1], p[2], p[3]): p[5] for p in mine})
    for s, kind, mb, c, start, _ in passes:
        if kind == "F" and s > 0:
            assert start >= ends[(s - 1, "F", mb, c)] - 1e-12
    assert max(p[5] for p in passes) == pytest.approx(pipeline_time_s([3.0] * pp, m, v), rel=1e-12)


@pytest.mark.parametrize(("pp", "m", "v"), [(4, 8, 1), (8, 32, 4)])
def test_schedule_draws_the_sends_the_model_charges(pp, m, v):
    """The Gantt plays the stages' sends out (a stage's time per micro-batch beyond its passes, 2·vpp
    transfers) synchronously, as the model composes them: it ends within 2 % of the model's pipeline time
    for those stage times, and later than without them."""
    f, b, sends = 0.05, 0.10, 0.012
    stages = [{"time_fwd_s": f, "time_bwd_s": b, "time_per_microbatch_s": f + b + sends, "sends_s": sends} for _ in range(pp)]
    svg = schedule_svg(stages, pp, v, m, None)
    shown = float(re.search(r"0 s — ([0-9.e+-]+) s shown", svg).group(1))
    assert shown == pytest.approx(pipeline_time_s([f + b + sends] * pp, m, v), rel=0.02)
    assert shown > max(p[5] for p in pipeline_schedule([f] * pp, [b] * pp, m, v)) + (m - 1) * sends / 2
    assert f"each boundary send {sends / (2 * v) * 1e3:.3g} ms" in svg


def _not_blank(png: Path) -> None:
    """The image has a fair share of non-white pixels and many distinct colours."""
    image = pytest.importorskip("matplotlib.image").imread(str(png))
    rgb = (image[..., :3] * 255).round().astype(int)
    dark = (rgb < 235).any(axis=-1).mean()
    colours = {tuple(c) for c in (rgb[::7, ::7] // 32).reshape(-1, 3).tolist()}
    assert dark > 0.03 and len(colours) >= 8, (dark, len(colours))


def test_report_screenshot_in_headless_chromium_is_not_blank(training_page, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium); the HTML structure tests still ran")
    path, _ = training_page
    shot = tmp_path / "shot.png"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}", "--window-size=1280,2000"]
    proc = subprocess.run([*cmd, path.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _not_blank(shot)


@pytest.mark.slow  # starts parasol processes
@pytest.mark.auto_method  # as the command runs: solve() takes its shortcuts
def test_plot_draws_serving_and_training_fronts(tmp_path):
    """pareto --plot: a serving front (two metrics, then three) and a training front, each a non-blank PNG."""
    pytest.importorskip("matplotlib")
    train = write_yaml(
        tmp_path / "t.yaml",
        {
            "model": TINY_GQA,
            "system": {"name": "dgx-h100", "num_gpus": 8},
            "workload": {"kind": "training", "seq_len": 2048, "global_batch": 16, "precision": "bf16"},
            "mapping": {"vpp": 1, "first_stage_layers": 0, "last_stage_layers": 0, "zero": 1, "recompute": "none"},
        },
    )
    serving = yaml.safe_load(SERVING_FRONT.read_text())
    few = write_yaml(tmp_path / "s.yaml", serving | {"mapping": {"batch": [8, 64, 512]}})  # a 3-metric front in 1 s
    jobs = [
        (SERVING_FRONT, "tokens_per_s_per_gpu,tokens_per_s_per_user"),
        (few, "ttft_s,tokens_per_s_per_gpu,peak_memory_gib"),
        (train, "throughput,memory"),
    ]
    for i, (problem, objectives) in enumerate(jobs):
        png = tmp_path / f"front{i}.png"
        proc = run_main(["pareto", str(problem), "--objectives", objectives, "--plot", str(png), "--json"])
        assert proc.returncode == 0, proc.stderr
        assert len(json.loads(proc.stdout)["front"]) >= 2
        _not_blank(png)
