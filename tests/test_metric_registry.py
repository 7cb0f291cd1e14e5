"""The metric registry (trainer/config/metrics.py): every metric declared once, every output derived
from it. Fails on a metric listed by hand anywhere else (code or docs), on one the registry lacks,
and on a registry entry that no output shows."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from trainer.config import metrics
from trainer.config.metrics import BY_NAME, PROMETHEUS_PREFIX, REGISTRY

ROOT = Path(__file__).resolve().parents[1]
NAMES = set(BY_NAME)
EXPORTED = {PROMETHEUS_PREFIX + metric.prometheus.name for metric in REGISTRY if metric.prometheus is not None}
HAND_LIST = 4  # this many metric names in one literal make a hand-written list
GENERATED = {
    "<!-- metric registry: generated from trainer/config/metrics.py -->": metrics.metrics_markdown,
    "<!-- prometheus metrics: generated from trainer/config/metrics.py -->": metrics.prometheus_markdown,
}


def shown_in(metric: metrics.Metric) -> list[str]:
    return [
        place
        for place, shown in [
            ("metrics.jsonl", metric.event is not None or metric.source == "envelope"),
            ("chart", bool(metric.charts)),
            ("CSV", metric.csv),
            ("TensorBoard", metric.tensorboard is not None),
            ("Prometheus", metric.prometheus is not None),
        ]
        if shown
    ]


# ---------------------------------------------------------------------------------------------
# The registry itself


def test_every_metric_is_shown_somewhere_and_says_what_it_means():
    assert len(NAMES) == len(REGISTRY), "a metric is declared twice"
    for metric in REGISTRY:
        assert shown_in(metric), f"{metric.name}: no output shows it (give it an event field, chart, CSV, ...)"
        assert metric.meaning.endswith(".") and "\n" not in metric.meaning and metric.unit, metric.name
        assert metric.source in metrics.SOURCES, metric.name
        assert metric.event in ("required", "optional", None), metric.name
        assert (metric.event is not None) == (metric.source in ("loop", "update")), metric.name
        assert not metric.must_be_finite or metric.event is not None, metric.name


def test_the_outputs_names_are_unique_and_follow_their_conventions():
    exported = [metric.prometheus for metric in REGISTRY if metric.prometheus is not None]
    assert len({item.name for item in exported}) == len(exported)
    for item in exported:
        assert item.type in ("gauge", "counter") and item.per in ("run", "gpu", "machine"), item.name
        assert item.name.endswith("_total") == (item.type == "counter"), item.name
    assert all(metrics.prometheus_help(metric).endswith(".") for metric in REGISTRY if metric.prometheus)
    tags = list(metrics.tensorboard_tags().values())
    assert len(set(tags)) == len(tags)
    diagnostics = [chart.position for _, chart in metrics.chart_metrics("diagnostics")]
    assert diagnostics == list(range(len(diagnostics))), "diagnostics positions must be 0, 1, 2, ..."
    main = metrics.chart_metrics("main")
    assert all(chart.option for _, chart in main) and len({chart.option for _, chart in main}) == len(main)
    assert {chart.group for metric in REGISTRY for chart in metric.charts} <= {"main", "diagnostics"}


def test_the_algorithms_declare_their_update_metrics_from_the_registry():
    """Each registered algorithm names the registry's `update` metrics it returns (the registry names
    no algorithm); every `update` metric is returned by one of them."""
    from trainer.algos.ppo_settings import PPO_MEAN_METRICS
    from trainer.algos.registry import ALGORITHMS

    declared = {name: registration.metric_names for name, registration in ALGORITHMS.items()}
    assert {"ppo", "a2c"} <= set(declared)
    for names in declared.values():
        assert set(names) <= set(metrics.metrics_of("update"))
    assert set(metrics.metrics_of("update")) <= {name for names in declared.values() for name in names}
    assert set(PPO_MEAN_METRICS) < set(declared["ppo"])
    assert PPO_MEAN_METRICS == ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")  # stacked so
    with pytest.raises(ValueError, match=r"'dqn' declares update metrics \['q_loss', 'fps'\]"):
        metrics.check_update_metrics("dqn", ("q_loss", "fps", "entropy"))
    with pytest.raises(KeyError, match="unknown metric source"):
        metrics.metrics_of("studio")


# ---------------------------------------------------------------------------------------------
# Every output reads it


def test_every_output_derives_its_list_from_the_registry():
    from studio import charts, views
    from trainer.algos.ppo import PPO, UPDATE_STAT_NAMES
    from trainer.algos.registry import registration
    from trainer.run.events import EVENT_SCHEMA
    from trainer.run.sinks import TensorBoardSink
    from trainer.serving.metrics_export import LOSS_FIELDS, MACHINE_METRICS, METRICS

    schema = EVENT_SCHEMA["metrics"]
    assert (schema.required, schema.optional) == (metrics.event_fields("required"), metrics.event_fields("optional"))
    assert set(UPDATE_STAT_NAMES) < set(PPO.metric_names) == set(registration("ppo").metric_names)
    assert TensorBoardSink.TAGS == metrics.tensorboard_tags()
    assert views.METRIC_COLUMNS == metrics.csv_columns()
    assert charts.DIAGNOSTICS == tuple((name, chart.label) for name, chart in metrics.chart_metrics("diagnostics"))
    assert charts.CHART_METRICS == ("score", "return", "length")
    assert {PROMETHEUS_PREFIX + name for name in [*METRICS, *MACHINE_METRICS]} == EXPORTED
    assert LOSS_FIELDS == metrics.must_be_finite()


def test_the_tensorboard_sink_writes_the_registrys_tags():
    from trainer.run.sinks import TensorBoardSink

    written = {}

    class Writer:
        def add_scalar(self, tag, value, step):
            written[tag] = value

    sink = TensorBoardSink.__new__(TensorBoardSink)  # no tensorboard package needed
    sink.writer = Writer()
    sink({"type": "metrics", "step": 1, **{name: 1.0 for name in NAMES}})
    assert set(written) == set(metrics.tensorboard_tags().values())


# ---------------------------------------------------------------------------------------------
# Listed nowhere else by hand


def _strings(items) -> list[str]:
    """The string constants among `items`, and among the items of tuples / lists in them (rows)."""
    found = []
    for item in items:
        if isinstance(item, ast.Constant) and isinstance(item.value, str):
            found.append(item.value)
        elif isinstance(item, (ast.Tuple, ast.List)):
            found += [
                inner.value for inner in item.elts if isinstance(inner, ast.Constant) and isinstance(inner.value, str)
            ]
    return found


def _metric_names(strings: list[str]) -> list[str]:
    """The strings that name a metric: a registry name or an exported one (with or without the prefix)."""
    return [text for text in strings if text in NAMES or text in EXPORTED or PROMETHEUS_PREFIX + text in EXPORTED]


def _string_collections(tree: ast.AST):
    """Every tuple, list or set literal's strings (rows included), and every dict literal's keys."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            yield node.lineno, _strings(node.elts)
        elif isinstance(node, ast.Dict):
            yield node.lineno, _strings([key for key in node.keys if key is not None])


def _algorithm_declarations(tree: ast.AST) -> set[int]:
    """The literals an algorithm declares its update metrics with (`metric_names = (...)`,
    `PPO_METRICS = (...)`): checked against the registry when it registers, not a copy of it."""
    declared = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(
                isinstance(target, ast.Name) and (target.id == "metric_names" or target.id.endswith("_METRICS"))
                for target in targets
            ):
                declared.add(node.value.lineno)
    return declared


from trainer.config.declaring import key_names  # noqa: E402

CONFIG_KEYS = set(key_names())


def test_no_code_lists_metrics_by_hand():
    """A tuple / list / dict of four or more metric names outside the registry is a second list that
    goes stale: derive it from trainer/config/metrics.py instead. (Code that reads a few fields by
    name is fine, and so is an algorithm's declaration of the update metrics it returns.)"""
    registry_file = ROOT / "trainer" / "config" / "metrics.py"
    algorithms = ROOT / "trainer" / "algos"
    files = [
        ROOT / "app.py",
        *[
            path
            for folder in ("trainer", "studio", "envs", "benchmarks")
            for path in sorted((ROOT / folder).rglob("*.py"))
        ],
    ]
    found = set()
    for path in files:
        if path == registry_file:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        declared = _algorithm_declarations(tree) if path.is_relative_to(algorithms) else set()
        for line, strings in _string_collections(tree):
            named = _metric_names(strings)
            if strings and set(strings) <= CONFIG_KEYS:  # a list of config keys, some named like metrics
                continue
            if len(named) >= HAND_LIST and line not in declared:
                found.add(f"{path.relative_to(ROOT)}:{line}: {named}")
    assert not found, "metric names listed by hand (derive them from trainer/config/metrics.py):\n" + "\n".join(
        sorted(found)
    )


def test_the_hand_list_check_catches_the_lists_this_registry_replaced():
    old = """DIAGNOSTICS = (("episode_length_mean", "Episode length"), ("explained_variance", "Explained variance"),
                   ("policy_loss", "Policy loss"), ("value_loss", "Value loss"))
LOSS_FIELDS = ("policy_loss", "value_loss", "entropy", "approx_kl")
METRICS = {"env_steps_total": 1, "updates_total": 2, "episodes_total": 3, "steps_per_second": 4}"""
    hits = [strings for _, strings in _string_collections(ast.parse(old)) if len(_metric_names(strings)) >= HAND_LIST]
    assert len(hits) == 3


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _without_generated_tables(text: str) -> str:
    """A page's text less the tables generated after any marker (docs/build.py): what was written by hand."""
    lines, kept, skipping = text.split("\n"), [], False
    for line in lines:
        if line.strip().startswith("<!--") and "generated from" in line:
            skipping = True
            continue
        if skipping and line.startswith("|"):
            continue
        skipping = False
        kept.append(line)
    return "\n".join(kept)


def test_the_docs_tables_are_generated_from_the_registry():
    page = ROOT / "docs" / "operations.md"
    text = page.read_text(encoding="utf-8")
    for marker, table in GENERATED.items():
        assert f"{marker}\n{table()}\n" in text, f"{page.name}: the table after {marker} is stale: python docs/build.py"


def test_no_page_lists_metrics_by_hand_or_names_one_the_registry_lacks():
    """Outside the generated tables, no Markdown table has two or more rows that start with a metric
    (that is a hand-written copy of the registry), and every `rlstudio_` name is exported."""
    hand_tables = []
    for page in _pages():
        text = _without_generated_tables(page.read_text(encoding="utf-8"))
        for word in re.findall(r"\brlstudio_\w+", text):
            assert word in EXPORTED, f"{page.relative_to(ROOT)} names {word}, which the registry does not export"
        rows = [line for line in text.split("\n") if line.startswith("| `")]
        for row in rows:
            first = row.split("|")[1].strip().strip("`")
            if first in NAMES or first in EXPORTED:
                hand_tables.append(f"{page.relative_to(ROOT)}: {row[:80]}")
    assert len(hand_tables) < 2, "metric rows written by hand (generate the table):\n" + "\n".join(hand_tables)


def test_the_deploy_files_name_only_exported_metrics():
    for path in sorted((ROOT / "deploy").rglob("*")):
        if path.is_file() and path.suffix in (".yml", ".yaml", ".json"):
            for word in re.findall(r"\brlstudio_\w+", path.read_text(encoding="utf-8")):
                assert word in EXPORTED, f"{path.relative_to(ROOT)} names {word}, which the registry does not export"


def test_the_documented_metrics_event_fields_are_the_registrys():
    """docs/trainer.md's event table (docs/architecture.md's: tests/test_events.py) lists the
    metrics event's fields: the registry's, no more, no fewer."""
    page = ROOT / "docs" / "trainer.md"
    row = next(line for line in page.read_text(encoding="utf-8").split("\n") if line.startswith("| `metrics` |"))
    listed = set(re.findall(r"\w+", " ".join(re.findall(r"`([^`]*)`", row.split("|")[2]))))
    assert listed == set(metrics.event_fields("required")) | set(metrics.event_fields("optional"))
