"""The live view's cluster panel: world size and one row per node (host, ranks, steps/s,
connected since), from the nodes.json the run's master keeps (trainer.cluster.nodes.NodeMonitor).

Every run launched through the elastic launcher has one: a studio run with `nproc_per_node` > 1
or `max_nodes` > 1, and a CLI run (`python -m trainer --nproc N`, `python -m trainer master`)
alike; a plain one-process run has none and shows no panel. An actor-learner run (issue 24;
trainer.cluster.nodes.write_actor_table) has rows with `"role": "actor"` and a top-level `learner`
(queue depth, dropped batches, actors): its summary line is the learner's and its actors get a
table of their own; a synchronous run's panel is unchanged. The file is data anyone could write:
every value is escaped. The worker command with the run's token appears only for the session
that started the run (it passes `join`); everyone else is told the token was shown there.
"""

from __future__ import annotations

import html
import time

from trainer.cluster.nodes import read_nodes

RECENT_LINES = 4  # connect / lost lines under the table (a CLI run's train.log has none of them)


def _duration(started: object, now: float) -> str:
    """How long ago `started` (unix time) was: '45 s', '12 min', '3.5 h'; '?' for a non-number."""
    if not _is_number(started):
        return "?"
    seconds = max(0.0, now - float(started))
    return (
        f"{seconds:.0f} s"
        if seconds < 120
        else f"{seconds / 60:.0f} min"
        if seconds < 7200
        else f"{seconds / 3600:.1f} h"
    )


def _since(started: object, now: float) -> str:
    if not _is_number(started):
        return "?"
    return f"{time.strftime('%H:%M:%S', time.localtime(float(started)))} ({_duration(started, now)} ago)"


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: object, digits: int = 0) -> str:
    return f"{value:,.{digits}f}" if _is_number(value) else "–"


def _row_html(row: dict, now: float) -> str:
    host = str(row.get("host", "?")) + (f" ({row['hostname']})" if row.get("hostname") else "")
    state = "lost" if row.get("lost") else "connected"
    cells = (
        host,
        row.get("ranks", "?"),
        _number(row.get("steps_per_second")),
        _since(row.get("connected_since"), now),
        state,
    )
    return _tr(state, cells)


def _actor_row_html(row: dict, now: float) -> str:
    host = str(row.get("host", "?")) + (f" ({row['hostname']})" if row.get("hostname") else "")
    state = "lost" if row.get("lost") else "connected"
    cells = (
        row.get("actor", "?"),
        host,
        _number(row.get("steps_per_second")),
        _number(row.get("policy_lag"), 1),
        _number(row.get("batches")),
        _duration(row.get("connected_since"), now),
        state,
    )
    return _tr(state, cells)


def _tr(state: str, cells: tuple) -> str:
    return f"<tr class='{state}'>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in cells) + "</tr>"


def _actors_head(nodes: dict, actors: list[dict]) -> str:
    """An actor-learner run's summary line: the learner, its actors, its queue."""
    learner = nodes["learner"]
    count = learner.get("actors")
    if not _is_number(count):
        count = sum(1 for row in actors if not row.get("lost"))
    if nodes.get("finished"):
        state = "finished"
    elif not count:
        state = "waiting for actors"
    else:
        state = "training"
    return (
        f"<b>Learner</b> · {_number(count)} actor(s) · master <code>{html.escape(str(nodes.get('master', '?')))}</code>"
        f" · {state} · queue depth {_number(learner.get('queue_depth'))} · dropped batches "
        f"{_number(learner.get('dropped_batches'))}"
    )


def _ranks_head(nodes: dict, live: int) -> str:
    """A synchronous run's summary line: world size, nodes, master, state."""
    escape = lambda value: html.escape(str(value))  # noqa: E731
    low, high = nodes.get("min_nodes", 1), nodes.get("max_nodes", 1)
    if nodes.get("finished"):
        state = "finished"
    elif live < (low if isinstance(low, int) else 1):
        state = f"waiting for workers: {live} of {escape(low)} node(s) needed"
    else:
        state = "training"
    return (
        f"<b>World size {escape(nodes.get('world_size', 0))}</b> "
        f"· {live} node(s) of {escape(low)}..{escape(high)} · master "
        f"<code>{escape(nodes.get('master', '?'))}</code> · {escape(state)}"
    )


def nodes_html(nodes: dict | None, join_command: str | None = None, now: float | None = None) -> str:
    """The panel for a nodes.json mapping (trainer.cluster.nodes.read_nodes); '' when there is none."""
    if not isinstance(nodes, dict):
        return ""
    now = time.time() if now is None else now
    escape = lambda value: html.escape(str(value))  # noqa: E731
    every_row = [row for row in nodes.get("nodes") or [] if isinstance(row, dict)]
    actors = [row for row in every_row if row.get("role") == "actor"]
    rows = [row for row in every_row if row.get("role") != "actor"]  # the ranks' nodes
    actor_learner = isinstance(nodes.get("learner"), dict)
    live = sum(1 for row in rows if not row.get("lost"))
    head = _actors_head(nodes, actors) if actor_learner else _ranks_head(nodes, live)
    tables = ""
    if rows or not actor_learner:
        body = "".join(_row_html(row, now) for row in rows)
        tables = (
            "<table class='cluster-nodes'><thead><tr><th>host</th><th>ranks</th><th>steps/s</th>"
            f"<th>connected since</th><th>state</th></tr></thead><tbody>{body}</tbody></table>"
        )
    if actor_learner:
        body = "".join(_actor_row_html(row, now) for row in actors)
        tables += (
            "<table class='cluster-actors'><thead><tr><th>actor</th><th>host</th><th>steps/s</th>"
            "<th>policy lag</th><th>batches</th><th>connected for</th><th>state</th></tr></thead>"
            f"<tbody>{body}</tbody></table>"
        )
    lines = [str(line) for line in (nodes.get("log") or [])][-RECENT_LINES:]
    recent = f"<pre class='cluster-log'>{escape(chr(10).join(lines))}</pre>" if lines else ""
    join = ""
    if join_command and not nodes.get("finished"):
        join = (
            f"<div class='cluster-join'>Start {'an actor' if actor_learner else 'a worker'} on another machine "
            f"(the token is shown only on this page):<br><code>{escape(join_command)}</code></div>"
        )
    elif (actor_learner or nodes.get("max_nodes", 1) not in (1, None)) and not nodes.get("finished"):
        join = (
            f"<div class='cluster-join'>This run accepts {'actors' if actor_learner else 'workers'}: "
            f"<code>python -m trainer worker --master {escape(nodes.get('master', '?'))}"
            f"{' --role actor' if actor_learner else ''} --token TOKEN</code> (the token was shown to the page or "
            "terminal that started the run)</div>"
        )
    return f"<div class='cluster-panel'><div class='cluster-head'>{head}</div>{tables}{join}{recent}</div>"


def run_nodes_html(run_dir: str | None, join_command: str | None = None) -> str:
    """The panel of the run in `run_dir` ('' for a run without a nodes.json)."""
    return nodes_html(read_nodes(run_dir), join_command) if run_dir else ""
