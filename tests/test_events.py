"""The event schema: declared once (trainer/run/events.py EVENT_SCHEMA), enforced by make_event, and
shown in docs/architecture.md as the same table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainer.run.events import EVENT_SCHEMA, make_event

DOCS = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def documented_schema() -> dict[str, tuple[set[str], set[str]]]:
    """type -> (required, optional) field names, from the table under "Events (the schema the studio reads)"."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("### Events (the schema the studio reads)") :]
    section = section[: section.index("\n#", 1)]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`\w+`", cells[0]):
            # Field names are the backticked words; notes in parentheses are plain text.
            rows[cells[0].strip("`")] = tuple(set(re.findall(r"`(\w+)`", cell)) for cell in cells[1:])
    return rows


def test_the_docs_table_is_the_schema_in_code():
    documented = documented_schema()
    assert set(documented) == set(EVENT_SCHEMA), "event types differ between docs/architecture.md and EVENT_SCHEMA"
    for kind, schema in EVENT_SCHEMA.items():
        required, optional = documented[kind]
        assert (required, optional) == (set(schema.required), set(schema.optional)), kind


def test_make_event_refuses_a_missing_or_an_undeclared_field():
    with pytest.raises(KeyError, match=r"checkpoint event: missing \['path'\]"):
        make_event("checkpoint", step=3)
    with pytest.raises(KeyError, match=r"fields not in the schema \['pth'\].*EVENT_SCHEMA"):
        make_event("checkpoint", step=3, path="/x", pth="/x")
    with pytest.raises(KeyError, match="unknown event type 'chekpoint'"):
        make_event("chekpoint", step=3, path="/x")
    event = make_event(
        "gif", step=1, path=Path("/r/a.gif"), episode_return=float("nan"), episode_score=2.0, frames=3, seconds=0.1
    )
    assert event["path"] == "/r/a.gif" and event["episode_return"] is None and isinstance(event["time"], float)


def test_the_metrics_event_has_the_metric_registrys_fields():
    """A metrics event's fields are declared in trainer/config/metrics.py; an undeclared one is refused
    with a message that says where to declare it."""
    from trainer.config.metrics import event_fields

    schema = EVENT_SCHEMA["metrics"]
    assert (schema.required, schema.optional) == (event_fields("required"), event_fields("optional"))
    with pytest.raises(KeyError, match=r"fields not in the schema \['kl_new'\].*trainer/config/metrics.py"):
        make_event("metrics", **{name: 0.0 for name in schema.required}, kl_new=1.0)
